"""A multi-process trainer whose main process cannot resume (no checkpoint in the run passes verification) ends
every rank with one line instead of leaving the other ranks waiting at a barrier for a main process that is gone."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from realm.run.layout import checkpoints_dir
from tests.helpers import ROOT, _free_port, subprocess_env

pytestmark = [pytest.mark.slow, pytest.mark.distributed]


def test_no_verifying_checkpoint_stops_every_rank_in_one_line(straight, tmp_path):
    common, straight_run = straight
    run = tmp_path / "run"
    shutil.copytree(straight_run, run, ignore=shutil.ignore_patterns("*.lock"))
    for checkpoint in checkpoints_dir(run).iterdir():  # every checkpoint's weights lose their last byte
        weights = max((p for p in checkpoint.rglob("*") if p.is_file() and p.name != "manifest.json"),
                      key=lambda p: p.stat().st_size)  # fmt: skip
        weights.write_bytes(weights.read_bytes()[:-1])
    env = subprocess_env()
    env.update(TOPOLOGY="multi_cpu", MAIN_PROCESS_PORT=str(_free_port()), PATH=f"{Path(sys.executable).parent}:"
               f"{env.get('PATH', '')}")  # fmt: skip
    proc = subprocess.run(["bash", "launch/pretrain.sh", *common, f"--train.run_dir={run}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    errors = [line for line in proc.stderr.splitlines() if line.startswith("realm train: error:")]
    assert proc.returncode != 0 and len(errors) == 2, proc.stderr[-3000:]
    assert all("passes verification" in line for line in errors), errors
    assert sum(line.count("rank 0:") for line in errors) == 1, errors  # the other rank names where it failed
