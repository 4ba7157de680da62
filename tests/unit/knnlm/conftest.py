"""Fixtures of the kNN-LM tests."""

from __future__ import annotations

import logging

import pytest


@pytest.fixture(autouse=True)
def _no_stale_log_handler():
    """``init_logging`` binds its handler to the ``sys.stderr`` of its first call, capsys's in the in-process command
    tests, which is closed after the test: the handlers a test adds are removed with it."""
    root = logging.getLogger()
    before = list(root.handlers)
    yield
    for handler in [h for h in root.handlers if h not in before]:
        root.removeHandler(handler)
