"""Test-wide environment: no hub look-ups, no wandb network, small thread counts (CI has 2 cores)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# note: the suite always runs two things at once (two xdist workers, each often beside a child process), and
# libgomp's default is to spin-wait between parallel regions: a 2-thread process beside a busy one then burns its
# time slices spinning (a 2-thread encoder step: 6.7 s against 3.7 s passive beside one busy process). Waiting
# passively changes no result (the reduction order is set by the thread count, not by how threads wait).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # note: each of the two workers computing in-process on 2 threads would oversubscribe the 2 cores;
    # a test that wants more threads sets them itself (torch.set_num_threads, --num_threads)
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory):
    """(LM folder, training jsonl, held-out jsonl): a tiny GPT-2 trained in-process on a small generated world."""
    from tests.helpers import make_tiny_lm

    return make_tiny_lm(tmp_path_factory.mktemp("tiny_lm"))


def pytest_addoption(parser):
    parser.addoption("--run-scale", action="store_true", help="run the opt-in `scale` tests (minutes each)")


def pytest_collection_modifyitems(config, items):
    """``scale`` tests (the 100k-passage rehearsal: minutes, GBs) are opt-in: skipped unless ``--run-scale`` or a
    ``-m`` expression that names ``scale`` is given, so ``python -m pytest -q`` and any other ``-m`` leave them out."""
    if config.getoption("--run-scale") or "scale" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="opt-in: pass --run-scale or -m scale")
    for item in items:
        if item.get_closest_marker("scale") is not None:
            item.add_marker(skip)
