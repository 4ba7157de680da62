"""A preempted trainer (SIGTERM mid-run, as SLURM sends before it takes the nodes) checkpoints the step it stopped at,
exits with ``PREEMPTED_EXIT_CODE`` and one line saying so, and the same command resumes it to the uninterrupted run's
losses and index versions at every step, no step logged twice."""

import signal
import subprocess
import sys
import time

import pytest

from realm.core.logging import read_metrics
from realm.run.publication import list_published, verify_published
from realm.training.preemption import PREEMPTED_EXIT_CODE
from tests.helpers import ROOT, builder_pids, run_module, subprocess_env
from tests.integration.trainer.conftest import per_step

pytestmark = pytest.mark.slow
SIGNAL_AFTER_STEP = 2


def test_sigterm_checkpoints_the_step_it_stops_at_and_the_resumed_run_is_exact(straight, tmp_path):
    common, straight = straight
    # note: no periodic checkpoint before the last step, so the one the run resumes from is the preemption's
    args = [*common, "--train.save_interval=100"]
    run = tmp_path / "run"
    trainer = subprocess.Popen(
        [sys.executable, "-m", "realm.trainer.pretrain", *args, f"--train.run_dir={run}"],
        cwd=ROOT, env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while max(per_step(run, "train/loss") or [0]) < SIGNAL_AFTER_STEP:
            assert trainer.poll() is None, f"the trainer ended before step {SIGNAL_AFTER_STEP}"
            assert time.monotonic() < deadline, f"no step {SIGNAL_AFTER_STEP} within 120 s"
            time.sleep(0.02)
        trainer.send_signal(signal.SIGTERM)
        _, stderr = trainer.communicate(timeout=60)
    finally:
        trainer.kill()
    assert trainer.returncode == PREEMPTED_EXIT_CODE, stderr[-3000:]
    (stopped, checkpoint), *others = list_published(run / "checkpoints", "step-")
    assert others == [] and SIGNAL_AFTER_STEP <= stopped < 6, (stopped, others)
    verify_published(checkpoint)  # complete: every file its manifest lists, checksums matching
    assert not [p for p in (run / "checkpoints").iterdir() if p.name.startswith(".")]  # nothing half-written
    assert f"stopped by SIGTERM after step {stopped}, checkpointed" in stderr
    assert max(per_step(run, "train/loss")) == stopped  # the steps since the last log were logged
    assert not builder_pids(run)

    run_module("realm.trainer.pretrain", *args, f"--train.run_dir={run}")
    for key in ("train/loss", "index/version"):
        a, b = per_step(straight, key), per_step(run, key)
        assert sorted(a) == sorted(b) == list(range(1, 7)), key
        for step in a:
            assert b[step] == pytest.approx(a[step], rel=1e-5, abs=1e-6), (key, step, stopped)
    steps = [r["step"] for r in read_metrics(run / "metrics.jsonl") if "train/loss" in r]
    assert steps == sorted(set(steps)), "a step was logged twice"
