"""One trainer per run directory: a second trainer started on a run that a live trainer holds is refused in one line
(exit code 2, the run directory and the holder's pid named) before it touches anything, and the first run ends
exactly as an uninterrupted one."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from realm.core.logging import read_metrics
from realm.run.layout import TRAINER_LOCK
from realm.run.publication import exclusive_lock, read_manifest
from tests.helpers import ROOT, _free_port, builder_pids, data_overrides, subprocess_env
from tests.integration.trainer.conftest import TINY, per_step

pytestmark = pytest.mark.slow


def test_a_second_trainer_on_a_live_run_is_refused_in_one_line_and_the_first_run_is_untouched(straight, tmp_path):
    common, straight_run = straight
    run = tmp_path / "run"
    command = [sys.executable, "-m", "realm.trainer.pretrain", *common, f"--train.run_dir={run}"]
    first = subprocess.Popen(command, cwd=ROOT, env=subprocess_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while read_manifest(run / "checkpoints" / "step-00000001") is None:  # a checkpoint the second could resume
            assert first.poll() is None and time.monotonic() < deadline, "the first trainer never saved step 1"
            time.sleep(0.05)
        os.kill(first.pid, signal.SIGSTOP)  # held still, so the second one certainly meets a live run
        try:
            second = subprocess.run([*command, "--train.seed=7"], cwd=ROOT, env=subprocess_env(), capture_output=True,
                                    text=True, timeout=90)  # fmt: skip
        finally:
            os.kill(first.pid, signal.SIGCONT)
        _, first_err = first.communicate(timeout=180)
    finally:
        first.kill()
        for pid in builder_pids(run):
            os.kill(pid, signal.SIGKILL)
    errors = [line for line in second.stderr.splitlines() if line.startswith("realm train:")]
    assert second.returncode == 2 and len(errors) == 1 and "Traceback" not in second.stderr, second.stderr[-3000:]
    assert str(run) in errors[0] and "another trainer" in errors[0] and f"pid {first.pid}" in errors[0], errors[0]
    assert first.returncode == 0, first_err[-3000:]
    assert yaml.safe_load((run / "config.yaml").read_text())["train"]["seed"] == 0  # the second wrote no config
    for key in ("train/loss", "index/version"):
        expected, found = per_step(straight_run, key), per_step(run, key)
        assert sorted(found) == sorted(expected) == list(range(1, 7)), key
        for step in expected:
            assert found[step] == pytest.approx(expected[step], rel=1e-5, abs=1e-6), (key, step)
    steps = [r["step"] for r in read_metrics(run / "metrics.jsonl")]
    assert steps == sorted(steps) and len([s for s in steps if s == 3]) == 1, "a record was logged twice"


@pytest.mark.distributed
def test_a_refusal_stops_every_rank_of_a_multi_process_trainer_in_one_line_each(tiny_world, tmp_path):
    """Only the main process takes the lock; the other rank hears of the refusal instead of waiting at a barrier."""
    run = tmp_path / "run"
    env = subprocess_env()
    env.update(TOPOLOGY="multi_cpu", MAIN_PROCESS_PORT=str(_free_port()), PATH=f"{Path(sys.executable).parent}:"
               f"{env.get('PATH', '')}")  # fmt: skip
    with exclusive_lock(run / TRAINER_LOCK):  # the run's trainer
        proc = subprocess.run(["bash", "launch/pretrain.sh", "--config", TINY, *data_overrides(tiny_world),
                               f"--train.run_dir={run}"], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=120)  # fmt: skip
    errors = [line for line in proc.stderr.splitlines() if line.startswith("realm train:")]
    assert proc.returncode != 0 and len(errors) == 2, proc.stderr[-3000:]
    assert all(str(run) in line and f"pid {os.getpid()}" in line for line in errors), errors
    assert [p.name for p in run.iterdir()] == [TRAINER_LOCK]  # nothing written, cut or removed
