"""The index-builder process: watches ``RUN/retriever/`` and keeps ``RUN/index/`` in step with the newest export.

    python -m realm.index_builder.watch --config configs/index/default.yaml --run_dir RUN [--index.factory=HNSW32 ...]

It polls with a sleep (never a busy loop), always builds the newest export (intermediate ones are skipped: only the
freshest index matters to the trainer), and exits when the trainer has written ``RUN/DONE`` and everything is
indexed. SIGTERM/SIGINT stop it between batches; the half-built staging folder is removed, and even a SIGKILL can
only leave an unpublished ``.staging-*`` folder that the next start deletes. One builder per run (a lock enforces it).
A failed build is retried with backoff while that may help (a full disk); when the builder cannot build, it records
why in ``RUN/index/BUILD_FAILED`` (a trainer waiting for that index stops with the reason) and exits with it on one
line (``realm.index.build_failure``).

With ``--enable_distributed=true`` under a launcher, N processes build each version together (``sharded.py``):
rank 0 holds the lock, polls and decides, every rank embeds its shard of the corpus, rank 0 publishes.

    torchrun --standalone --nproc_per_node 2 -m realm.index_builder.watch --config C --run_dir RUN \
        --enable_distributed=true
    CUDA_VISIBLE_DEVICES=4,5,6,7 torchrun --standalone --nproc_per_node 4 -m realm.index_builder.watch --config C \
        --run_dir RUN --enable_distributed=true --device=cuda     # the builder on GPUs 4-7, the trainer on 0-3
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import faiss
import torch

from realm.core.checks import Problems
from realm.core.config import config_from_command_line, to_dict
from realm.core.errors import ConfigError, MissingFileError, UserError, run_command
from realm.core.logging import init_logging
from realm.core.process_exit import exit_code_after_run
from realm.core.tracking import TrackingConfig, finish_builder_run, init_builder_run, log_builder
from realm.core.precision import check_precision
from realm.index.build_failure import FailedBuild, IndexBuildError, clear_build_failure, record_build_failure
from realm.index.build_version import build_index_version
from realm.index.builder_heartbeat import beating
from realm.index.builder_group import BuilderGroup
from realm.index.embedding import BuildCancelled
from realm.index.mips import IndexConfig
from realm.index.shards import remove_shard_folders
from realm.index_builder.sharded import build_index_version_sharded
from realm.run import layout, publication
from realm.run.live_index import current_index_step, remove_if_broken
from realm.training.lineage import log_index_version

logger = logging.getLogger(__name__)

LOCK_FILE = ".builder.lock"


@dataclass(kw_only=True, slots=True)
class IndexBuilderConfig:
    """The builder process: where to watch, how often, and how to embed and index."""

    run_dir: str = ""
    """Run directory shared with the trainer (required; usually given as ``--run_dir RUN``)."""
    poll_interval_s: float = 1.0
    """Seconds to sleep between looks at ``RUN/retriever/`` when there is nothing to build."""
    batch_size: int = 64
    """Blocks per document-embedder forward pass."""
    keep_versions: int = 3
    """Published index versions kept on disk (the live one is always kept as well)."""
    num_threads: int = 0
    """Torch and FAISS CPU threads; 0 leaves the defaults (the trainer passes 1 when it shares a small box)."""
    device: str = "cpu"
    """Device of the document embedder, e.g. "cpu" or "cuda:1"; with ``enable_distributed`` "cpu" or "cuda" (each
    rank takes its local GPU; give the builder its own GPUs with ``CUDA_VISIBLE_DEVICES``)."""
    precision: str = "auto"
    """Dtype of the document embedder's weights while it embeds the corpus: "fp32", "bf16", "fp16" (GPU only) or
    "auto": bf16 where the device computes it natively (a GPU with bf16, a CPU with AMX or AVX-512 BF16), else fp32
    (``realm.core.precision``). The vectors are stored as float32 either way, and the trainer re-embeds its
    candidates live, so precision only affects which blocks are candidates."""
    enable_distributed: bool = False
    """Join the process group of a launcher (``torchrun``, ``accelerate launch``) and build each version with all its
    processes, one corpus shard each. Off by default, so a builder spawned by a multi-process trainer (which inherits
    the trainer's launcher variables) never joins the trainer's group."""
    collective_timeout_s: float = 3600.0
    """With ``enable_distributed``: how long a rank waits for its peers (the slowest shard, and rank 0's FAISS build
    and publish) before failing loudly."""
    once: bool = False
    """Build the newest export if the index is behind it, then exit."""
    exit_when_done: bool = True
    """Exit once ``RUN/DONE`` exists and the newest export is indexed."""
    parent_pid: int = 0
    """The trainer that started this builder (set by the trainer): the builder stops, between batches, as soon as
    that process is gone, so a killed trainer never leaves an orphan holding the run's lock (0: no parent)."""
    hold_file: str = ""
    """A file that holds the builder, once started, before it takes the run: the trainer starts its child builder at
    the start of its own set-up with ``RUN/index/BUILDER_HOLD`` in place, so that the builder's start-up (its imports,
    the device) overlaps the trainer's, and removes it once it has cleared what a killed run left. Empty: no hold."""
    lock_timeout_s: float = 30.0
    """How long to wait for the run's builder lock (an orphan of a killed trainer is still stopping) before failing."""
    build_retries: int = 3
    """How many times a failed build of one export is tried again when that may help (a full disk, a file-system
    error, memory; not a bad token id or a corrupt export) before the builder gives up: it then records why in
    ``RUN/index/BUILD_FAILED``, which stops a trainer waiting for that index at once, and exits with the reason
    (``realm.index.build_failure``)."""
    retry_backoff_s: float = 2.0
    """Seconds before the first retry of a failed build; each further retry waits twice as long (2, 4, 8 s)."""
    index: IndexConfig = field(default_factory=IndexConfig)
    """FAISS index built for each version."""
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    """Where build metrics go; a builder spawned by the trainer joins the trainer's W&B group."""

    def __post_init__(self) -> None:
        problems = Problems()
        if self.poll_interval_s <= 0:
            problems.add(f"poll_interval_s must be positive, got {self.poll_interval_s}")
        if self.batch_size <= 0:
            problems.add(f"batch_size must be positive, got {self.batch_size}")
        if self.keep_versions < 1:
            problems.add(f"keep_versions must be >= 1, got {self.keep_versions}")
        if self.index.metric != "ip":
            problems.add(f"index.metric must be 'ip' for REALM's document index (MIPS), got {self.index.metric!r}")
        if self.num_threads < 0:
            problems.add(f"num_threads must be >= 0, got {self.num_threads}")
        problems.check(check_precision, self.precision)
        if self.precision == "fp16" and not self.device.startswith("cuda"):
            problems.add(f"precision fp16 needs a GPU device, got device {self.device!r}; use bf16 on CPU")
        if self.build_retries < 0 or self.retry_backoff_s < 0:
            problems.add(f"build_retries and retry_backoff_s must be >= 0, got {self.build_retries}, "
                         f"{self.retry_backoff_s}")  # fmt: skip
        if self.collective_timeout_s <= 0:
            problems.add(f"collective_timeout_s must be positive, got {self.collective_timeout_s}")
        if self.enable_distributed and self.device not in ("cpu", "cuda"):
            problems.add(
                f"with enable_distributed, device must be 'cpu' or 'cuda' (each rank takes its local GPU), got "
                f"{self.device!r}; choose the builder's GPUs with CUDA_VISIBLE_DEVICES"
            )
        problems.raise_if_any()


def _build(
    cfg: IndexBuilderConfig,
    step: int,
    path: Path,
    current: int,
    stop: threading.Event,
    group: BuilderGroup,
    tracker=None,
) -> None:
    if group.is_main:
        exports = publication.list_published(layout.retriever_dir(cfg.run_dir), layout.RETRIEVER_PREFIX)
        skipped = [s for s, _ in exports if current < s < step]
        logger.info(
            "building index for retriever step %d (live index: %d; skipping exports %s)", step, current, skipped
        )
    started = time.monotonic()
    options = dict(
        batch_size=cfg.batch_size, keep_versions=cfg.keep_versions, precision=cfg.precision, should_stop=stop.is_set
    )
    if cfg.enable_distributed:
        device = "cpu" if cfg.device == "cpu" else str(group.device)
        version = build_index_version_sharded(cfg.run_dir, step, path, cfg.index, group, device=device, **options)
    else:
        version = build_index_version(cfg.run_dir, step, path, cfg.index, device=cfg.device, **options)
    if not group.is_main:
        return
    seconds = time.monotonic() - started
    num = publication.read_manifest(version)["num_vectors"]
    logger.info("published %s: %d blocks in %.1f s (%.0f blocks/s)", version.name, num, seconds, num / seconds)
    log_builder(
        tracker,
        {
            "index/version": step,
            "index/build_s": seconds,
            "index/num_vectors": num,
            "index/blocks_per_s": num / seconds,
        },
        step=step,
    )
    log_index_version(tracker, Path(cfg.run_dir), step, version)  # W&B lineage: retriever export -> build -> index


@contextlib.contextmanager
def _tracked(cfg: IndexBuilderConfig, group: BuilderGroup):
    """A W&B run in the trainer's group (or None without W&B, and on ranks > 0), finished however the loop ends."""
    tracker = init_builder_run(cfg.tracking, Path(cfg.run_dir), to_dict(cfg)) if group.is_main else None
    try:
        yield tracker
    finally:
        finish_builder_run(tracker)


@contextlib.contextmanager
def _hold_run(cfg: IndexBuilderConfig, group: BuilderGroup):
    """Rank 0 takes the run's builder lock, beats the run's builder heartbeat while it holds it
    (``realm.index.builder_heartbeat``) and removes what crashed builders left; if it cannot, every rank fails."""
    index_dir = layout.index_dir(cfg.run_dir)
    with contextlib.ExitStack() as stack:

        def take() -> None:
            refusal = f"run directory {cfg.run_dir} is in use by another index builder (one per run); stop it first"
            stack.enter_context(publication.exclusive_lock(index_dir / LOCK_FILE, cfg.lock_timeout_s, refusal))
            # note: from here until the builder lets go, a trainer waiting for an index knows one is at work
            stack.enter_context(beating(cfg.run_dir))
            for stale in publication.clean_staging(index_dir):
                logger.info("removed stale staging folder %s", stale)
            # note: the builder also removes old exports; a kill mid-removal leaves trash there (the exports' staging
            # folders are the trainer's, written while the builder runs, so only the trash is the builder's to clean)
            for stale in publication.clean_trash(layout.retriever_dir(cfg.run_dir)):
                logger.info("removed %s, left by a removal a kill interrupted", stale)
            # note: finished shards of the newest export, not indexed yet, are what a crashed N-process build leaves
            # to reuse; any other shards can never be used again
            latest = layout.latest_retriever_export(cfg.run_dir)
            pending = latest is not None and latest[0] > current_index_step(cfg.run_dir)
            keep = {latest[2]["weights_sha256"]} if pending else set()
            for stale in remove_shard_folders(layout.index_dir(cfg.run_dir), keep):
                logger.info("removed shards of another retriever version %s", stale)

        group.from_main(take)
        yield


def _decide(cfg: IndexBuilderConfig, failed: FailedBuild | None) -> tuple:
    """Rank 0's next move: ("build", step, path, live step), ("wait",), ("exit",) or ("give up", step, reason)."""
    if failed is not None and failed.give_up:
        return ("give up", failed.step, failed.reason)
    # note: read DONE before listing exports; the trainer writes its last export, then DONE.
    done = cfg.exit_when_done and layout.is_done(cfg.run_dir)
    latest = layout.latest_retriever_export(cfg.run_dir)
    remove_if_broken(cfg.run_dir)
    current = current_index_step(cfg.run_dir)
    if latest is not None and latest[0] > current:
        backing_off = failed is not None and failed.step == latest[0] and time.monotonic() < failed.retry_at
        return ("wait",) if backing_off else ("build", latest[0], str(latest[1]), current)
    return ("exit",) if cfg.once or done else ("wait",)


def _give_up(cfg: IndexBuilderConfig, step: int, reason: str, group: BuilderGroup) -> IndexBuildError:
    """Records rank 0's reason for giving up on ``step`` for the trainer; returns the error every rank exits with."""
    if group.is_main:
        try:
            record_build_failure(cfg.run_dir, step, reason)
        except OSError as err:  # note: a full disk may not take even the record; the reason is still printed
            logger.error("cannot record the failure in %s: %s", layout.index_dir(cfg.run_dir), err)
    return IndexBuildError(reason)


def run_builder(cfg: IndexBuilderConfig, *, stop: threading.Event | None = None) -> int:
    """Runs the build loop until ``stop`` is set, ``cfg.once`` is satisfied or the run is done; returns #builds.

    A failed build is retried with backoff while that may help (``build_retries``, ``retry_backoff_s``; a newer
    export is built instead as soon as there is one); otherwise the reason is recorded in the run and
    ``IndexBuildError`` raised (``realm.index.build_failure``).
    """
    if not cfg.run_dir:
        raise ConfigError("run_dir is not set (pass --run_dir RUN)")
    if not Path(cfg.run_dir).is_dir():
        # note: the trainer creates its run directory; a builder pointed anywhere else would wait forever
        found = "is not a directory" if Path(cfg.run_dir).exists() else "does not exist"
        raise MissingFileError(f"run_dir {cfg.run_dir} {found} (start the trainer first, or fix the path)")
    stop = stop if stop is not None else threading.Event()
    if cfg.parent_pid:
        threading.Thread(target=_watch_parent, args=(cfg.parent_pid, stop), name="parent-watch", daemon=True).start()
    if cfg.num_threads > 0:
        torch.set_num_threads(cfg.num_threads)
        faiss.omp_set_num_threads(cfg.num_threads)
    if cfg.hold_file and not _held(cfg, stop):
        return 0
    group = BuilderGroup.join(cfg.device, cfg.collective_timeout_s) if cfg.enable_distributed else BuilderGroup()
    if cfg.enable_distributed:
        init_logging(is_main_process=group.is_main)
        logger.info("index builder: %d process(es), rank 0 on %s", group.world_size, group.device)
        if group.world_size == 1:
            logger.warning("enable_distributed but the launcher started ONE process (see DESIGN.md section 3)")
    return _loop(cfg, stop, group)


def _held(cfg: IndexBuilderConfig, stop: threading.Event, poll_s: float = 0.1) -> bool:
    """Waits while ``cfg.hold_file`` exists, having started the GPU's context meanwhile; False if stopped first."""
    hold = Path(cfg.hold_file)
    if hold.exists():
        if cfg.device.startswith("cuda") and not cfg.enable_distributed:
            torch.empty(0, device=cfg.device)  # note: the CUDA context, a second or more, before the first build
        started = time.monotonic()
        while hold.exists() and not stop.wait(poll_s):
            pass
        logger.info("held %.1f s while the trainer set up", time.monotonic() - started)
    return not stop.is_set()


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (a killed parent nobody has reaped yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # note: Linux only; elsewhere a zombie parent reads as alive until it is reaped
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _watch_parent(pid: int, stop: threading.Event, interval_s: float = 0.5) -> None:
    """Sets ``stop`` once process ``pid`` (the trainer) is gone; the builder then stops like on SIGTERM."""
    while not stop.wait(interval_s):
        if not process_alive(pid):
            logger.error("the trainer (pid %d) that started this builder is gone; stopping", pid)
            stop.set()


def _loop(cfg: IndexBuilderConfig, stop: threading.Event, group: BuilderGroup) -> int:
    """The poll-build loop; rank 0 decides each move and every rank follows it (one process: trivially)."""
    built, failed = 0, None
    with _hold_run(cfg, group), _tracked(cfg, group) as tracker:
        if group.is_main:
            clear_build_failure(cfg.run_dir)  # note: this builder tries again whatever an earlier one gave up on
        # note: a stop on any rank stops all (the launcher signals every rank, but a rank may be signalled alone)
        while not any(group.all_gather(stop.is_set())):
            decision = group.from_main(lambda: _decide(cfg, failed))
            if decision[0] == "exit":
                break
            if decision[0] == "give up":
                raise _give_up(cfg, decision[1], decision[2], group)
            if decision[0] == "wait":
                time.sleep(cfg.poll_interval_s)
                continue
            _, step, path, current = decision
            try:
                _build(cfg, step, Path(path), current, stop, group, tracker)
                built, failed = built + 1, None
            except BuildCancelled as err:
                logger.info("build for step %d cancelled: %s", step, err)
                break
            except Exception as err:
                failed = FailedBuild.after(failed, step, err, cfg.build_retries, cfg.retry_backoff_s)
                _log_failure(failed, err, cfg.build_retries)
            if cfg.once and failed is None:
                break
            # note: a newer export may have arrived during the build; decide again at once
    return built


def _log_failure(failed: FailedBuild, err: Exception, retries: int) -> None:
    # note: a user error's message is the whole story; anything else may be a bug, so its traceback goes to the log
    log = logger.error if isinstance(err, UserError) else logger.exception
    then = "" if failed.give_up else f"; retrying in {max(failed.retry_at - time.monotonic(), 0):.1f} s"
    log("build for step %d failed (attempt %d of %d): %s%s", failed.step, failed.attempts, retries + 1, err, then)


def main(argv: list[str] | None = None) -> int:
    cfg = config_from_command_line(IndexBuilderConfig, argv, "realm index", __doc__)
    init_logging()
    stop = threading.Event()
    # note: the handlers only set a flag; the loop checks it between batches and between polls.
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        built = run_builder(cfg, stop=stop)
        logger.info("index builder exiting after %d build(s)%s", built, " (stopped)" if stop.is_set() else "")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return exit_code_after_run(torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1, 0)


if __name__ == "__main__":
    raise SystemExit(run_command("realm index", main, sys.argv[1:]))
