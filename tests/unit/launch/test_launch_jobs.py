"""launch/ict.sh, launch/warmup.sh and launch/finetune.sh (launch/common.sh run_training_job): one process per GPU,
the right module and arguments, CPU topologies, a clear error without GPUs, and 143 after a preemption signal
(checked with stand-ins for nvidia-smi and accelerate, as tests/unit/launch/test_launch.py does)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import ROOT
from tests.unit.launch.test_launch import _stub

JOBS = {"ict.sh": "realm.warmstart.ict_train", "warmup.sh": "realm.warmstart.warmup",
        "finetune.sh": "realm.finetune.train"}  # fmt: skip


def _run(tmp_path: Path, script: str, accelerate: str = "", gpus: str = "0\\n1\\n2\\n3\\n", **env: str):
    """Runs launch/SCRIPT with stand-ins; returns (completed process, the accelerate calls as 'DEVICES|args')."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir(exist_ok=True)
    log.write_text("")
    _stub(bin_dir, "nvidia-smi", f"printf '{gpus}'")
    _stub(bin_dir, "accelerate", f'echo "$CUDA_VISIBLE_DEVICES|${{ACCELERATE_USE_CPU:-}}|$*" >> {log}\n{accelerate}')
    full_env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "TOPOLOGY", "NUM_PROCESSES")}
    full_env.update(PATH=f"{bin_dir}:{os.environ['PATH']}", **env)
    proc = subprocess.run(["bash", str(ROOT / "launch" / script), "--config", "C.yaml", "--train.run_dir=r u n"],
                          env=full_env, capture_output=True, text=True)  # fmt: skip
    return proc, log.read_text().splitlines()


@pytest.mark.parametrize("script", sorted(JOBS))
def test_a_job_runs_one_process_per_gpu_with_its_module_and_arguments(tmp_path, script):
    proc, (call,) = _run(tmp_path, script)
    assert proc.returncode == 0, proc.stderr
    devices, use_cpu, args = call.split("|")
    assert devices == "0,1,2,3" and use_cpu == ""
    assert "single_node_gpus.yaml" in args and "--num_processes 4" in args
    assert args.endswith(f"-m {JOBS[script]} --config C.yaml --train.run_dir=r u n")


def test_trainer_gpus_machines_and_cpu_topologies(tmp_path):
    _, (call,) = _run(tmp_path, "ict.sh", TRAINER_GPUS="2,3", TOPOLOGY="multi_node", NUM_MACHINES="2",
                      MACHINE_RANK="1", MAIN_PROCESS_IP="10.0.0.1")  # fmt: skip
    devices, _, args = call.split("|")
    assert devices == "2,3" and "--num_processes 4" in args and "--machine_rank 1" in args
    _, (call,) = _run(tmp_path, "warmup.sh", TOPOLOGY="multi_cpu")
    devices, use_cpu, args = call.split("|")
    assert use_cpu == "true" and "multi_cpu.yaml" in args and "--num_processes" not in args


def test_no_visible_gpu_is_one_line_naming_the_script(tmp_path):
    proc, calls = _run(tmp_path, "ict.sh", gpus="", TOPOLOGY="single_node_gpus")
    assert proc.returncode == 2 and calls == []
    assert "launch/ict.sh: TOPOLOGY=single_node_gpus but no GPU is visible" in proc.stderr


def test_a_preemption_signal_makes_the_job_exit_143(tmp_path):
    """The trainer checkpointed and exited; accelerate's launcher reports 1; the script says 143 (requeue)."""
    proc, _ = _run(tmp_path, "warmup.sh", accelerate="kill -USR1 $PPID; sleep 0.2; exit 1")
    assert proc.returncode == 143
    proc, _ = _run(tmp_path, "ict.sh", accelerate="exit 3")
    assert proc.returncode == 3  # a plain failure stays itself
