"""``init_logging``'s handler follows ``sys.stderr``: a caller that swaps stderr after the set-up (a test's capture,
``contextlib.redirect_stderr``) must neither lose records nor turn them into "Logging error" tracebacks."""

import contextlib
import io
import logging
import threading

import pytest

from realm.core.logging import init_logging


@pytest.fixture()
def fresh_root():
    """The root logger without realm's handler (another test may have installed one), restored afterwards."""
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    for handler in [h for h in root.handlers if getattr(h, "_realm", False)]:
        root.removeHandler(handler)
    yield root
    root.handlers[:] = saved_handlers
    root.setLevel(saved_level)


def test_records_go_to_the_stderr_of_their_time_even_after_the_first_one_is_closed(fresh_root):
    first = io.StringIO()
    with contextlib.redirect_stderr(first):
        init_logging()
        logging.getLogger("realm.test").info("while the first stderr is open")
    first.close()  # what pytest does to a test's capture when the test ends
    later = io.StringIO()
    with contextlib.redirect_stderr(later):
        logging.getLogger("realm.test").info("from the main thread")
        thread = threading.Thread(target=lambda: logging.getLogger("realm.test").warning("from another thread"))
        thread.start()
        thread.join()
    out = later.getvalue()
    assert "Logging error" not in out and "Traceback" not in out, out
    assert "from the main thread" in out and "from another thread" in out
    assert sum(getattr(h, "_realm", False) for h in fresh_root.handlers) == 1


def test_a_second_set_up_adds_no_second_handler(fresh_root):
    init_logging()
    init_logging(is_main_process=False)
    assert sum(getattr(h, "_realm", False) for h in fresh_root.handlers) == 1
    assert fresh_root.level == logging.WARNING  # a non-main rank reports warnings only
