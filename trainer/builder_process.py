"""The index builder as the trainer's child process: its command line, a launcher-free environment, and its life
(started with the run, restarted when it dies, stopped with the run, and stopping itself if the trainer dies)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Mapping, Sequence

from accelerate import Accelerator

from realm.core.tracking import TrackingConfig, resolve_run_name
from realm.index.build_failure import IndexBuildError, builder_gave_up
from realm.pretrain.refresh import RefreshConfig
from realm.run.layout import BUILDER_HOLD, index_dir
from realm.training.accelerator import accelerator_precision

logger = logging.getLogger(__name__)

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
    parent_pid: int = 0,
    hold_file: str | Path = "",
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of the child builder (nothing is started).

    One process: ``python -m realm.index_builder.watch --config C --run_dir=RUN --num_threads=T ...``. N processes:
    ``python -m torch.distributed.run --standalone --nproc_per_node N -m realm.index_builder.watch ...
    --enable_distributed=true``; ``--standalone`` gives the builder a group of its own on a free local port, and
    torchrun exits non-zero as soon as one rank dies, so the trainer sees a dead builder either way.
    """
    build = [
        "-m",
        "realm.index_builder.watch",
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
    if parent_pid:
        cmd.append(f"--parent_pid={parent_pid}")  # note: every builder rank stops when the trainer is gone
    if hold_file:
        cmd.append(f"--hold_file={hold_file}")  # note: every rank waits while it exists (ChildBuilder.release)
    env = builder_env(os.environ if parent_env is None else parent_env, str(cfg.builder_devices))
    return [*cmd, *extra_args], env


def tracking_args(tracking: TrackingConfig, run_dir: Path) -> list[str]:
    """The child builder joins the trainer's W&B group."""
    return [
        f"--tracking.report_to={tracking.report_to}",
        f"--tracking.project={tracking.project}",
        f"--tracking.run_name={resolve_run_name(tracking, run_dir)}",
        f"--tracking.wandb_mode={tracking.wandb_mode}",
    ]


class ChildBuilder:
    """The builder process(es) of a single-machine run, owned by the trainer's main process. Its output goes to
    ``RUN/builder.log``; it gets the trainer's pid, so it stops by itself if the trainer is killed.

    ``start_held`` starts it at the beginning of the trainer's set-up, held by ``RUN/index/BUILDER_HOLD`` until
    ``release``: its start-up (imports, the device) then overlaps the trainer's, where it used to delay the first
    index. It may not take the run before the trainer has cleared what a killed run left (``discard_after``): it would
    build from an export about to be removed."""

    def __init__(self, cfg: RefreshConfig, run_dir: Path, extra_args: Sequence[str], num_trainers: int) -> None:
        self.cfg, self.run_dir, self.extra_args, self.num_trainers = cfg, Path(run_dir), list(extra_args), num_trainers
        self.hold_file = index_dir(self.run_dir) / BUILDER_HOLD
        self.process: subprocess.Popen | None = None
        self.restarts = 0
        self.started_at = 0.0
        """``time.time()`` of the latest start: a failure recorded before it is not this builder's."""

    def start_held(self) -> None:
        self.hold_file.parent.mkdir(parents=True, exist_ok=True)
        self.hold_file.touch()
        self.start()

    def release(self) -> None:
        """Lets a held builder take the run (a restarted one is never held: the file is gone)."""
        self.hold_file.unlink(missing_ok=True)

    def start(self) -> None:
        log = open(self.run_dir / "builder.log", "a")
        cmd, env = builder_command(
            self.cfg, self.run_dir, self.extra_args, parent_pid=os.getpid(), hold_file=self.hold_file
        )
        self.started_at = time.time()
        self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        logger.info(
            "started index builder (pid %d, %d process(es)%s), log in %s",
            self.process.pid,
            self.cfg.builder_num_processes,
            f" on GPU(s) {self.cfg.builder_devices}" if self.cfg.builder_devices else "",
            self.run_dir / "builder.log",
        )

    def exit_code(self) -> int | None:
        """None while it runs (or before it starts)."""
        return None if self.process is None else self.process.poll()

    def failure(self) -> str | None:
        """None while the builder runs; a builder that died is reported and restarted (``builder_restarts`` times at
        most, wherever the trainer notices it: between steps or while it waits for an index); past that, what went
        wrong. A builder that gave up on a build (it retried what retrying may fix) is not restarted: its recorded
        reason is what went wrong."""
        code = self.exit_code()
        if code is None:
            return None
        gave_up = builder_gave_up(self.run_dir, self.started_at)
        if gave_up is not None:
            return gave_up
        log = self.run_dir / "builder.log"
        if self.restarts >= self.cfg.builder_restarts:
            return f"the index builder exited with code {code} (restarted {self.restarts} times already)"
        logger.error("the index builder exited with code %d; restarting it (see %s)", code, log)
        self.restarts += 1
        self.start()
        return None

    def check(self) -> None:
        """Between steps: ``failure``; one with no restarts left stops the run on one trainer process (with several,
        their next wait for an index reports it on all of them)."""
        message = self.failure()
        if message is None:
            return
        log = self.run_dir / "builder.log"
        if self.num_trainers == 1:
            raise IndexBuildError(f"{message}; see {log}")
        logger.error("%s; see %s", message, log)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.release()  # note: after it is gone, so that a held builder never takes the run on its way out


def start_held_builder(
    refresh: RefreshConfig, tracking: TrackingConfig, run_dir: Path, accelerator: Accelerator
) -> ChildBuilder:
    """A trainer's child builder, started and held (``ChildBuilder.start_held``) in the trainer's W&B group."""
    # note: it embeds in the precision the trainer resolved to, unless the refresh config names its own: a run is then
    # in one precision, as its config says (the index chooses the candidates it trains on)
    refresh = replace(refresh, builder_precision=refresh.builder_precision or accelerator_precision(accelerator))
    builder = ChildBuilder(refresh, run_dir, tracking_args(tracking, run_dir), accelerator.num_processes)
    builder.start_held()
    return builder
