"""launch/slurm/*.sbatch run as SLURM runs them: with the SLURM_* environment of a 2-node job and stand-ins for
``srun`` (one task per node, SLURM_PROCID set, signals passed on to each task's process group as slurmstepd does),
``scontrol`` (the node list; requeue recorded), ``nvidia-smi`` (4 GPUs), ``accelerate`` and ``torchrun`` (each call
recorded). Checked: each node's machine rank, the rendezvous address and port, where the builder runs, and that a
SIGUSR1 to the batch shell reaches the trainer's launcher, ends the script with 143 and requeues the job."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import ROOT

SLURM = ROOT / "launch" / "slurm"
SRUN = """
echo "srun $*" >> "$CALLS"
while [[ "$1" == --* ]]; do shift; done
pids=()
for ((rank = 0; rank < SLURM_NNODES; rank++)); do
    SLURM_PROCID=$rank setsid "$@" &
    pids+=($!)
done
trap 'echo "srun got USR1" >> "$CALLS"; for p in "${pids[@]}"; do kill -USR1 -- "-$p" 2>/dev/null || true; done' USR1
status=0
for p in "${pids[@]}"; do
    while kill -0 "$p" 2>/dev/null; do wait "$p" || true; done
    s=0; wait "$p" || s=$?
    if ((s > status)); then status=$s; fi
done
exit "$status"
"""
SCONTROL = """
if [[ "$1 $2" == "show hostnames" ]]; then printf 'gpu-node07\\ngpu-node08\\n'; else echo "scontrol $*" >> "$CALLS"; fi
"""
# note: python, as torch's elastic agent is: it handles SIGUSR1 (PET_SIGNALS_TO_HANDLE) though its shell ignores it
LAUNCHER = """#!{python}
import os, signal, sys, time
def record(line):
    with open(os.environ["CALLS"], "a") as f:
        f.write(line + "\\n")
record(f"{name} {{os.environ.get('CUDA_VISIBLE_DEVICES', '')}}|{{' '.join(sys.argv[1:])}}"
       f"|PET_SIGNALS_TO_HANDLE={{os.environ.get('PET_SIGNALS_TO_HANDLE')}}")
if os.environ.get("TRAIN_UNTIL_SIGNAL") and "{name}" == "accelerate":
    got = []
    signal.signal(signal.SIGUSR1, lambda *_: got.append(1))
    open(os.environ["CALLS"] + f".ready{{os.getpid()}}", "w").close()
    while not got:
        time.sleep(0.01)
    record("USR1 reached the launcher")
    sys.exit(1)  # what accelerate's launcher exits with when a worker exits 143
"""


def _stub(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(body if body.startswith("#!") else f"#!/usr/bin/env bash\n{body}\n")
    path.chmod(0o755)


def _start(tmp_path: Path, script: str, *args: str, **env: str) -> tuple[subprocess.Popen, Path]:
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    calls.write_text("")
    _stub(bin_dir, "srun", SRUN)
    _stub(bin_dir, "scontrol", SCONTROL)
    _stub(bin_dir, "nvidia-smi", "printf '0\\n1\\n2\\n3\\n'")
    for name in ("accelerate", "torchrun", "python"):
        _stub(bin_dir, name, LAUNCHER.format(python=sys.executable, name=name))
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith(("SLURM_", "PET_", "BUILDER_", "MAIN_PROCESS")) and k not in (
                    "CUDA_VISIBLE_DEVICES", "TOPOLOGY", "NUM_MACHINES", "MACHINE_RANK")}  # fmt: skip
    full_env.update(
        PATH=f"{bin_dir}:{os.environ['PATH']}", CALLS=str(calls), RUN_DIR=str(tmp_path / "run"),
        SLURM_JOB_ID="4242", SLURM_NNODES="2", SLURM_JOB_NODELIST="gpu-node[07-08]", SLURM_SUBMIT_DIR=str(ROOT), **env,
    )  # fmt: skip
    # note: run from elsewhere, as sbatch runs its copy of the script from the spool directory
    proc = subprocess.Popen(["bash", str(SLURM / script), *args], cwd=tmp_path, env=full_env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    return proc, calls


def _calls(calls: Path, name: str) -> list[str]:
    return sorted(line.split(" ", 1)[1] for line in calls.read_text().splitlines() if line.startswith(f"{name} "))


def test_pretrain_sbatch_gives_each_node_its_rank_and_node_0_as_the_rendezvous(tmp_path):
    proc, calls = _start(tmp_path, "pretrain.sbatch", "--config", "configs/pretrain/base.yaml")
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    (srun,) = _calls(calls, "srun")
    assert srun.startswith("--kill-on-bad-exit=1 bash -c ") and srun.endswith(" pretrain --config configs/pretrain/base.yaml")
    trainers = _calls(calls, "accelerate")
    assert len(trainers) == 2
    for rank, trainer in enumerate(trainers):
        devices, args, pet = trainer.split("|")
        assert devices == "0,1,2" and "launch/accelerate/multi_node.yaml" in args
        assert f"--machine_rank {rank} " in args and "--num_machines 2 " in args and "--num_processes 6" in args
        assert "--main_process_ip gpu-node07" in args and "--main_process_port 29500" in args
        assert args.endswith("--config configs/pretrain/base.yaml --refresh.spawn_builder=false")
        assert "SIGUSR1" in pet.split("=", 1)[1].split(",")  # torch's agent passes it on to its workers
    # every node's last GPU builds: one builder group over the nodes, its own rendezvous on node 0
    builders = _calls(calls, "torchrun")
    assert len(builders) == 2
    for rank, builder in enumerate(builders):
        devices, args, _ = builder.split("|")
        assert devices == "3" and f"--nnodes 2 --node_rank {rank} --nproc_per_node 1" in args
        assert "--master_addr gpu-node07 --master_port 29501" in args and "--enable_distributed=true" in args
        assert f"--run_dir {tmp_path / 'run'} --device=cuda" in args
    assert _calls(calls, "scontrol") == []  # a finished run is not requeued


def test_pretrain_sbatch_builder_on_node_0_only_when_asked(tmp_path):
    proc, calls = _start(tmp_path, "pretrain.sbatch", "--config", "configs/pretrain/base.yaml",
                         BUILDER_NODES="first", MAIN_PROCESS_PORT="31000")  # fmt: skip
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert all("--main_process_port 31000" in t for t in _calls(calls, "accelerate"))
    assert _calls(calls, "torchrun") == []  # one builder GPU on node 0: a single process, no group
    (builder,) = _calls(calls, "python")
    assert builder.startswith("3|-m realm.index_builder.watch --config configs/index/default.yaml")


@pytest.mark.parametrize("script, module", [("pretrain.sbatch", "realm.trainer.pretrain"),
                                            ("finetune.sbatch", "realm.finetune.train")])  # fmt: skip
def test_usr1_to_the_batch_shell_reaches_the_trainers_and_requeues_the_job(tmp_path, script, module):
    proc, calls = _start(tmp_path, script, "--config", "C.yaml", TRAIN_UNTIL_SIGNAL="1")
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("calls.ready*"))) < 2:  # both nodes' launchers are running
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, calls.read_text()
        time.sleep(0.05)
    proc.send_signal(signal.SIGUSR1)  # what SLURM sends ahead of the time limit (#SBATCH --signal=B:USR1@...)
    _, stderr = proc.communicate(timeout=60)
    lines = calls.read_text().splitlines()
    assert lines.count("USR1 reached the launcher") == 2 and "srun got USR1" in lines, lines
    assert all(module in t for t in _calls(calls, "accelerate"))
    assert proc.returncode == 143, stderr  # the launch script reports the trainer's preemption as 143
    assert _calls(calls, "scontrol") == ["requeue 4242"], stderr
    assert "requeued" in stderr


def test_index_sbatch_joins_every_gpu_of_every_node_in_one_builder_group(tmp_path):
    proc, calls = _start(tmp_path, "index.sbatch", "--run_dir", "/shared/r")
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    builders = _calls(calls, "torchrun")
    assert len(builders) == 2
    for rank, builder in enumerate(builders):
        devices, args, _ = builder.split("|")
        assert devices == "0,1,2,3" and f"--nnodes 2 --node_rank {rank} --nproc_per_node 4" in args
        assert "--master_addr gpu-node07 --master_port 29600" in args
        assert args.endswith("--enable_distributed=true --config configs/index/default.yaml --device=cuda "
                             "--precision=bf16 --run_dir /shared/r")  # fmt: skip
    assert _calls(calls, "accelerate") == []
