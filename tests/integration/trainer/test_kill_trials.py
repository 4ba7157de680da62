"""Randomised SIGKILL trials (seeded, bounded): the trainer, with its child builder, is killed at a random moment of
a tiny run and started again. After each kill no builder is left running; the restarted run resumes from its newest
checkpoint that verifies and ends exactly as an uninterrupted run: the same loss and the same index at every step,
no step logged twice."""

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from realm.core.logging import read_metrics
from tests.helpers import ROOT, builder_pids, data_overrides, run_module, subprocess_env

pytestmark = pytest.mark.slow
TINY = "configs/pretrain/tiny.yaml"
TRIALS = 3
SEED = 1234


def _per_step(run, key):
    return {r["step"]: r[key] for r in read_metrics(run / "metrics.jsonl") if key in r}


def test_trainer_killed_at_random_moments_leaves_no_process_and_resumes_exactly(tiny_world, tmp_path):
    common = ["--config", TINY, "--train.log_interval=1", "--train.save_interval=1", *data_overrides(tiny_world)]
    straight = tmp_path / "straight"
    run_module("trainer.pretrain", *common, f"--train.run_dir={straight}")
    rng = random.Random(SEED)
    for trial in range(TRIALS):
        run = tmp_path / f"trial{trial}"
        kill_after = rng.randint(1, 5)  # the kill lands while the trainer works on a later step (or saves, exports)
        extra_delay = rng.uniform(0.0, 0.5)
        trainer = subprocess.Popen(
            [sys.executable, "-m", "trainer.pretrain", *common, f"--train.run_dir={run}"],
            cwd=ROOT, env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 120
            while max(_per_step(run, "train/loss") or [0]) < kill_after and trainer.poll() is None:
                assert time.monotonic() < deadline, f"trial {trial}: the trainer never reached step {kill_after}"
                time.sleep(0.05)
            time.sleep(extra_delay)
            os.kill(trainer.pid, signal.SIGKILL)
            trainer.wait()
            deadline = time.monotonic() + 30
            while builder_pids(run) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not builder_pids(run), f"trial {trial}: the builder outlived its killed trainer"
        finally:
            trainer.kill()
            for pid in builder_pids(run):
                os.kill(pid, signal.SIGKILL)
        run_module("trainer.pretrain", *common, f"--train.run_dir={run}")
        for key in ("train/loss", "index/version"):
            a, b = _per_step(straight, key), _per_step(run, key)
            assert sorted(a) == sorted(b) == list(range(1, 7)), (trial, key)
            for step in a:
                assert b[step] == pytest.approx(a[step], rel=1e-5, abs=1e-6), (trial, key, step, kill_after)
        steps = [r["step"] for r in read_metrics(run / "metrics.jsonl") if "train/loss" in r]
        assert steps == sorted(set(steps)), f"trial {trial}: a step was logged twice"
        assert not builder_pids(run)
