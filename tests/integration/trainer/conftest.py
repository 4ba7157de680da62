"""One uninterrupted tiny pre-training run that the resume and kill tests compare against."""

import time

import pytest

from realm.core.logging import read_metrics
from tests.helpers import data_overrides, run_module

TINY = "configs/pretrain/tiny.yaml"


def per_step(run, key):
    """``{step: value}`` of ``key`` in the run's ``metrics.jsonl`` (what the resume tests compare step by step)."""
    return {r["step"]: r[key] for r in read_metrics(run / "metrics.jsonl") if key in r}


def wait_for_step(run, step: int, proc, timeout: float = 120) -> None:
    """Returns once the run has logged ``train/loss`` at ``step`` or later; fails the test if ``proc`` (the process
    that must stay up meanwhile) ends first or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while max(per_step(run, "train/loss") or [0]) < step:
        assert proc.poll() is None, f"{proc.args[:3]} ended before step {step}"
        assert time.monotonic() < deadline, f"no step {step} within {timeout:.0f} s"
        time.sleep(0.02)


@pytest.fixture(scope="session")
def straight(tiny_world, tmp_path_factory):
    """``(common arguments, run)``: refresh every 2 steps with max_staleness 0 (the trainer waits for each refresh), a
    checkpoint after every step, all kept; the tests start their runs with the same arguments."""
    common = [
        "--config", TINY, "--train.log_interval=1", "--train.save_interval=1", "--train.keep_checkpoints=10",
        *data_overrides(tiny_world),
    ]  # fmt: skip
    run = tmp_path_factory.mktemp("straight") / "run"
    run_module("realm.trainer.pretrain", *common, f"--train.run_dir={run}")
    return common, run
