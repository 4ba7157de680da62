"""Test-wide environment: no hub look-ups, no wandb network, small thread counts (CI has 2 cores)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory):
    """(LM folder, training jsonl, held-out jsonl): a tiny GPT-2 trained in-process on a small generated world."""
    from tests.helpers import make_tiny_lm

    return make_tiny_lm(tmp_path_factory.mktemp("tiny_lm"))
