"""The index builder as the trainer's child process: its command line and a launcher-free environment."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Mapping, Sequence

from realm.pretrain.refresh import RefreshConfig

# note: what a launcher sets for the processes it starts (torchrun, accelerate launch); a child builder that
# inherited them would try to join the trainer's process group (or torchrun would read them as its own)
DISTRIBUTED_ENV_VARS = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "GROUP_WORLD_SIZE",
        "ROLE_RANK",
        "ROLE_NAME",
        "ROLE_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
    }
)


DISTRIBUTED_ENV_PREFIXES = ("TORCHELASTIC_", "ACCELERATE_")


def builder_env(parent: Mapping[str, str], devices: str = "") -> dict[str, str]:
    """The child builder's environment: ``parent`` without the trainer's launcher variables, and
    ``CUDA_VISIBLE_DEVICES=devices`` when ``devices`` is set."""
    env = {
        k: v for k, v in parent.items() if k not in DISTRIBUTED_ENV_VARS and not k.startswith(DISTRIBUTED_ENV_PREFIXES)
    }
    if devices:
        env["CUDA_VISIBLE_DEVICES"] = devices
    return env


def builder_command(
    cfg: RefreshConfig,
    run_dir: str | Path,
    extra_args: Sequence[str] = (),
    *,
    parent_env: Mapping[str, str] | None = None,
    python: str = sys.executable,
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of the child builder (nothing is started).

    One process: ``python -m index_builder.build --config C --run_dir=RUN --num_threads=T ...``. N processes:
    ``python -m torch.distributed.run --standalone --nproc_per_node N -m index_builder.build ...
    --enable_distributed=true``; ``--standalone`` gives the builder a group of its own on a free local port, and
    torchrun exits non-zero as soon as one rank dies, so the trainer sees a dead builder either way.
    """
    build = [
        "-m",
        "index_builder.build",
        "--config",
        cfg.builder_config,
        f"--run_dir={run_dir}",
        f"--num_threads={cfg.builder_num_threads}",
    ]
    if cfg.builder_num_processes > 1:
        launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(cfg.builder_num_processes)]
        cmd = [python, *launcher, *build, "--enable_distributed=true"]
    else:
        cmd = [python, *build]
    if cfg.builder_devices:
        cmd.append("--device=cuda")
    if cfg.builder_precision:
        cmd.append(f"--precision={cfg.builder_precision}")
    env = builder_env(os.environ if parent_env is None else parent_env, str(cfg.builder_devices))
    return [*cmd, *extra_args], env
