"""Multi-node pre-training rehearsed on one host: two "machines" (one ``launch/pretrain.sh`` each, TOPOLOGY
``multi_node_cpu``, MACHINE_RANK 0 and 1, MAIN_PROCESS_IP 127.0.0.1, one gloo process per machine) train exactly as
one process with the whole batch: machine 1 is killed mid-run (launcher, agent and worker, as when a node is lost),
machine 0 then fails instead of hanging, and both started again resume from the newest checkpoint; the steps logged
before the kill and after the resume are those of the one-process run, losses and index versions.

The environment is what ``launch/slurm/pretrain.sbatch`` gives each node (NUM_MACHINES, MACHINE_RANK,
MAIN_PROCESS_IP, MAIN_PROCESS_PORT); the run directory is shared, as on a cluster's file system."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from realm.core.logging import read_metrics
from tests.helpers import ROOT, _free_port, subprocess_env
from tests.integration.trainer.conftest import per_step, wait_for_step

pytestmark = [pytest.mark.slow, pytest.mark.distributed]


def _machine(rank: int, port: int, args: list[str], log: Path) -> subprocess.Popen:
    """One machine's ``launch/pretrain.sh`` (its own process group, so a kill takes its launcher and worker)."""
    env = subprocess_env()
    env.update(TOPOLOGY="multi_node_cpu", NUM_MACHINES="2", NUM_PROCESSES="2", MACHINE_RANK=str(rank),
               MAIN_PROCESS_IP="127.0.0.1", MAIN_PROCESS_PORT=str(port))  # fmt: skip
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    with log.open("w") as out:
        return subprocess.Popen(["bash", "launch/pretrain.sh", *args], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip


def _both(args: list[str], logs: Path) -> list[subprocess.Popen]:
    port = _free_port()
    return [_machine(rank, port, args, logs / f"machine{rank}.log") for rank in (0, 1)]


def _kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every process below it, whatever their process group or session."""
    root = psutil.Process(pid)
    # note: the launcher first (the tree is listed before any kill): killed after its children, the launcher could
    # see its worker die and exit 137 itself before its own SIGKILL landed (seen on loaded cores)
    for proc in [root, *root.children(recursive=True)]:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass


def _wait(procs: list[subprocess.Popen], timeout: float = 240) -> list[int]:
    deadline = time.monotonic() + timeout
    try:
        return [proc.wait(timeout=max(1.0, deadline - time.monotonic())) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                _kill_tree(proc.pid)


def _same_steps(straight: Path, run: Path) -> None:
    for key in ("train/loss", "index/version"):
        a, b = per_step(straight, key), per_step(run, key)
        assert sorted(a) == sorted(b) == list(range(1, 7)), key
        for step in a:
            assert b[step] == pytest.approx(a[step], rel=1e-5, abs=1e-6), (key, step)
    steps = [r["step"] for r in read_metrics(run / "metrics.jsonl") if "train/loss" in r]
    assert steps == sorted(set(steps)), "a step was logged twice"


def test_two_machines_on_localhost_train_and_resume_like_one_process(straight, tmp_path):
    common, straight = straight
    args = [*common, "--train.batch_size=4", "--train.precision=fp32"]  # 2 machines x 4 = the straight run's 8

    killed = tmp_path / "killed"
    (tmp_path / "killed_logs").mkdir()
    machines = _both([*args, f"--train.run_dir={killed}"], tmp_path / "killed_logs")
    wait_for_step(killed, 3, machines[1], timeout=180)
    _kill_tree(machines[1].pid)  # a node lost: its launcher, torchrun's agent and the worker (in a session of its own)
    lost = time.monotonic()
    codes = _wait(machines, timeout=120)  # note: machine 0 must notice its peer is gone, not wait forever
    assert codes[0] != 0 and codes[1] == -signal.SIGKILL, codes
    print(f"machine 0 ended {time.monotonic() - lost:.1f} s after machine 1 was lost")
    assert max(per_step(killed, "train/loss")) < 6, "the run finished before the kill: nothing was tested"

    codes = _wait(_both([*args, f"--train.run_dir={killed}"], tmp_path / "killed_logs"))
    log = (tmp_path / "killed_logs" / "machine0.log").read_text()
    assert codes == [0, 0] and "resumed from" in log, log[-4000:]
    assert all(r["train/world_size"] == 2 for r in read_metrics(killed / "metrics.jsonl") if "train/loss" in r)
    _same_steps(straight, killed)  # steps before the kill from the first launch, after it from the resumed one
