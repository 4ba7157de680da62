"""launch/: accelerate configs load with accelerate's own loader, scripts parse, and pretrain.sh places the trainer
and the builder on the GPUs it should (checked with stand-ins for nvidia-smi, accelerate and python)."""

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import torch
from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file
from accelerate.utils import DistributedType

from realm.training.accelerator import mixed_precision_for
from tests.helpers import ROOT

LAUNCH = ROOT / "launch"
CONFIGS = sorted((LAUNCH / "accelerate").glob("*.yaml"))
SCRIPTS = sorted([*LAUNCH.glob("*.sh"), *LAUNCH.glob("slurm/*")])


def test_the_documented_topologies_exist():
    assert {p.stem for p in CONFIGS} >= {"single_cpu", "multi_cpu", "single_node_gpus", "multi_node"}
    assert {p.name for p in SCRIPTS} >= {"pretrain.sh", "finetune.sh", "common.sh", "pretrain.sbatch"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_accelerate_config_loads_with_accelerates_loader(path):
    config = load_config_from_file(str(path))
    assert isinstance(config, ClusterConfig)
    assert config.num_processes >= 1 and config.num_machines >= 1 and 0 <= config.machine_rank < config.num_machines
    assert config.mixed_precision in ("no", "bf16", "fp16")
    assert config.dynamo_config == {}  # no torch.compile: the step's shapes change with every batch
    if path.stem.endswith("cpu"):
        # CPU runs stay fp32 and, with several processes, must be MULTI_GPU + use_cpu (DESIGN.md section 3)
        assert config.use_cpu and config.mixed_precision == "no"
        assert config.distributed_type == (
            DistributedType.NO if config.num_processes == 1 else DistributedType.MULTI_GPU
        )
    else:
        assert not config.use_cpu and config.distributed_type == DistributedType.MULTI_GPU
        assert config.gpu_ids == "all"  # the scripts choose GPUs with CUDA_VISIBLE_DEVICES
    if config.num_machines > 1:
        assert config.main_process_ip and config.main_process_port


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_script_parses_and_runs_from_anywhere(path):
    subprocess.run(["bash", "-n", str(path)], check=True)
    text = path.read_text()
    if path.name != "common.sh":  # sourced, never run
        assert text.startswith("#!/usr/bin/env bash\n") and os.access(path, os.X_OK)
        assert "set -euo pipefail" in text


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_scripts_pass_shellcheck():
    subprocess.run(["shellcheck", "-x", *map(str, SCRIPTS)], cwd=ROOT, check=True)


def _stub(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!/usr/bin/env bash\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def _pretrain_sh(tmp_path: Path, **env: str) -> tuple[list[str], list[str]]:
    """Runs launch/pretrain.sh with 4 fake GPUs; returns the accelerate and python (builder) calls it made, each as
    ``CUDA_VISIBLE_DEVICES|args``."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir(exist_ok=True)
    log.write_text("")
    _stub(bin_dir, "nvidia-smi", "printf '0\\n1\\n2\\n3\\n'")
    for name in ("accelerate", "python", "torchrun"):
        _stub(bin_dir, name, f'echo "{name} $CUDA_VISIBLE_DEVICES|$*" >> {log}')
    full_env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "TOPOLOGY")}
    full_env.update(PATH=f"{bin_dir}:{os.environ['PATH']}", RUN_DIR=str(tmp_path / "run"), **env)
    subprocess.run(
        ["bash", str(LAUNCH / "pretrain.sh"), "--config", "configs/pretrain/base.yaml"], env=full_env, check=True
    )
    calls = log.read_text().splitlines()
    return [c for c in calls if c.startswith("accelerate ")], [c for c in calls if not c.startswith("accelerate ")]


def test_pretrain_sh_puts_the_trainer_on_all_gpus_but_the_last_and_the_builder_on_the_last(tmp_path):
    (trainer,), (builder,) = _pretrain_sh(tmp_path)
    devices, args = trainer.split(" ", 1)[1].split("|")
    assert devices == "0,1,2" and "single_node_gpus.yaml" in args and "--num_processes 3" in args
    assert args.endswith("--refresh.spawn_builder=false")  # the last override wins
    devices, args = builder.split(" ", 1)[1].split("|")
    assert builder.startswith("python ") and devices == "3"
    assert f"-m realm.index_builder.watch --config configs/index/default.yaml --run_dir {tmp_path / 'run'}" in args
    assert args.endswith("--device=cuda --precision=bf16")


def test_pretrain_sh_placement_is_overridable(tmp_path):
    (trainer,), (builder,) = _pretrain_sh(
        tmp_path, TRAINER_GPUS="0,1", BUILDER_GPUS="2,3", BUILDER_CONFIG="c.yaml", BUILDER_PRECISION="fp32"
    )
    assert trainer.startswith("accelerate 0,1|") and "--num_processes 2" in trainer
    assert (
        builder.startswith("torchrun 2,3|")
        and "--nproc_per_node 2" in builder
        and "--enable_distributed=true" in builder
        and "--config c.yaml" in builder
        and builder.endswith("--precision=fp32")
    )
    (trainer,), builders = _pretrain_sh(tmp_path, BUILDER_GPUS="none", NUM_PROCESSES="2")
    assert trainer.startswith("accelerate 0,1,2|") and "--num_processes 2" in trainer and builders == []


def test_pretrain_sh_refuses_more_trainer_processes_than_gpus(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _stub(bin_dir, "nvidia-smi", "printf '0\\n'")  # one GPU, shared by the trainer and the builder
    _stub(bin_dir, "accelerate", "exit 0")
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "TOPOLOGY")}
    env.update(PATH=f"{bin_dir}:{os.environ['PATH']}", RUN_DIR=str(tmp_path / "run"), NUM_PROCESSES="2")
    proc = subprocess.run(["bash", str(LAUNCH / "pretrain.sh"), "--config", "configs/pretrain/base.yaml"], env=env,
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 2
    assert "NUM_PROCESSES=2 trainer processes but only 1 GPU(s)" in proc.stderr and "TOPOLOGY=multi_cpu" in proc.stderr


def test_pretrain_sh_multi_node_starts_the_builder_on_node_0_only(tmp_path):
    nodes = dict(TOPOLOGY="multi_node", NUM_MACHINES="2", MAIN_PROCESS_IP="node0")
    (trainer,), (builder,) = _pretrain_sh(tmp_path, MACHINE_RANK="0", **nodes)
    assert "--num_processes 6" in trainer and "--machine_rank 0" in trainer and "--main_process_ip node0" in trainer
    assert builder.startswith("python 3|")
    (trainer,), builders = _pretrain_sh(tmp_path, MACHINE_RANK="1", **nodes)
    assert trainer.startswith("accelerate 0,1,2|") and "--machine_rank 1" in trainer and builders == []


@pytest.mark.parametrize(
    "requested, use_cpu, gpu, precision, expected",
    [
        ("bf16", "", False, "fp32", "no"),  # the launcher asks for bf16, the config for fp32: the config decides
        ("fp16", "true", True, "auto", "no"),  # GPUs present, but the launcher put this process on CPU: fp32 training
        ("bf16", "true", True, "auto", "bf16"),  # an explicit bf16 from the launcher runs on a bf16 CPU too
        ("fp16", "", True, "auto", "fp16"),  # auto takes the launcher's explicit fp16 on a GPU (before Ampere)
        ("bf16", "", True, "fp32", "no"),
        ("bf16", "", True, "auto", "bf16"),  # a GPU with bf16: auto keeps the launcher's bf16
        ("no", "", True, "bf16", "bf16"),
        (None, "", False, "auto", "no"),  # CPU training under auto stays fp32 (the demo study's precision log)
        (None, "", False, "bf16", "bf16"),
    ],
)
def test_the_config_precision_decides_over_the_launcher(monkeypatch, requested, use_cpu, gpu, precision, expected):
    from realm.core import precision as precision_module

    for name, value in (("ACCELERATE_MIXED_PRECISION", requested), ("ACCELERATE_USE_CPU", use_cpu)):
        if value:
            monkeypatch.setenv(name, value)
        else:
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    monkeypatch.setattr(precision_module, "cpu_flags", lambda: frozenset({"avx512f", "avx512_bf16"}))
    assert mixed_precision_for(precision) == expected
