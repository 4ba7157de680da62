"""The index-builder process: watches ``RUN/retriever/`` and keeps ``RUN/index/`` in step with the newest export.

    python -m index_builder.build --config configs/index/default.yaml --run_dir RUN [--index.factory=HNSW32 ...]

It polls with a sleep (never a busy loop), always builds the newest export (intermediate ones are skipped: only the
freshest index matters to the trainer), and exits when the trainer has written ``RUN/DONE`` and everything is
indexed. SIGTERM/SIGINT stop it between batches; the half-built staging folder is removed, and even a SIGKILL can
only leave an unpublished ``.staging-*`` folder that the next start deletes. One builder per run (a lock enforces it).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import faiss
import torch

from index_builder.publish import build_index_version
from realm import run_dir as rd
from realm.config import ConfigError, load_config, to_dict
from realm.embedding import BuildCancelled
from realm.index import IndexConfig
from realm.logging import init_logging
from realm.tracking import TrackingConfig, finish_builder_run, init_builder_run, log_builder

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
    """Device of the document embedder, e.g. "cpu" or "cuda:1"."""
    once: bool = False
    """Build the newest export if the index is behind it, then exit."""
    exit_when_done: bool = True
    """Exit once ``RUN/DONE`` exists and the newest export is indexed."""
    index: IndexConfig = field(default_factory=IndexConfig)
    """FAISS index built for each version."""
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    """Where build metrics go; a builder spawned by the trainer joins the trainer's W&B group."""

    def __post_init__(self) -> None:
        if self.poll_interval_s <= 0:
            raise ValueError(f"poll_interval_s must be positive, got {self.poll_interval_s}")
        if self.batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {self.batch_size}")
        if self.keep_versions < 1:
            raise ValueError(f"keep_versions must be >= 1, got {self.keep_versions}")
        if self.num_threads < 0:
            raise ValueError(f"num_threads must be >= 0, got {self.num_threads}")


def current_index_step(run_dir: str) -> int:
    """Retriever step of the live index, or -1 when there is none (or CURRENT names an unreadable version)."""
    version = rd.current_index_version(run_dir)
    manifest = rd.read_manifest(version) if version is not None else None
    return int(manifest["step"]) if manifest is not None else -1


def _build(cfg: IndexBuilderConfig, step: int, path: Path, current: int, stop: threading.Event, tracker=None) -> None:
    exports = rd.list_published(rd.retriever_dir(cfg.run_dir), rd.RETRIEVER_PREFIX)
    skipped = [s for s, _ in exports if current < s < step]
    logger.info("building index for retriever step %d (live index: %d; skipping exports %s)", step, current, skipped)
    started = time.monotonic()
    version = build_index_version(
        cfg.run_dir,
        step,
        path,
        cfg.index,
        batch_size=cfg.batch_size,
        keep_versions=cfg.keep_versions,
        device=cfg.device,
        should_stop=stop.is_set,
    )
    seconds = time.monotonic() - started
    num = rd.read_manifest(version)["num_vectors"]
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


@contextlib.contextmanager
def _tracked(cfg: IndexBuilderConfig):
    """A W&B run in the trainer's group (or None without W&B), finished however the loop ends."""
    tracker = init_builder_run(cfg.tracking, Path(cfg.run_dir), to_dict(cfg))
    try:
        yield tracker
    finally:
        finish_builder_run(tracker)


def run_builder(cfg: IndexBuilderConfig, *, stop: threading.Event | None = None) -> int:
    """Runs the build loop until ``stop`` is set, ``cfg.once`` is satisfied or the run is done; returns #builds.

    A failed build is logged and its export is not retried (the builder waits for a newer one) unless ``cfg.once``,
    in which case the error propagates.
    """
    if not cfg.run_dir:
        raise ValueError("run_dir is not set (pass --run_dir RUN)")
    stop = stop if stop is not None else threading.Event()
    if cfg.num_threads > 0:
        torch.set_num_threads(cfg.num_threads)
        faiss.omp_set_num_threads(cfg.num_threads)
    index_dir = rd.index_dir(cfg.run_dir)
    built, failed_step = 0, None
    with rd.exclusive_lock(index_dir / LOCK_FILE), _tracked(cfg) as tracker:
        for stale in rd.clean_staging(index_dir):
            logger.info("removed stale staging folder %s", stale)
        while not stop.is_set():
            # note: read DONE before listing exports; the trainer writes its last export, then DONE.
            done = cfg.exit_when_done and rd.is_done(cfg.run_dir)
            latest = rd.latest_retriever_export(cfg.run_dir)
            current = current_index_step(cfg.run_dir)
            if latest is not None and latest[0] > current and latest[0] != failed_step:
                try:
                    _build(cfg, latest[0], latest[1], current, stop, tracker)
                    built += 1
                except BuildCancelled as err:
                    logger.info("build for step %d cancelled: %s", latest[0], err)
                    break
                except Exception:
                    if cfg.once:
                        raise
                    logger.exception("build for step %d failed; waiting for a newer export", latest[0])
                    failed_step = latest[0]
                if cfg.once:
                    break
                continue  # note: a newer export may have arrived during the build
            if cfg.once or done:
                break
            time.sleep(cfg.poll_interval_s)
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m index_builder.build", allow_abbrev=False, description=__doc__)
    parser.add_argument("--config", default=None, help="YAML file (configs/index/*.yaml); other flags are overrides")
    args, overrides = parser.parse_known_args(argv)
    init_logging()
    try:
        cfg = load_config(IndexBuilderConfig, args.config, overrides)
    except ConfigError as err:
        parser.error(str(err))
    stop = threading.Event()
    # note: the handlers only set a flag; the loop checks it between batches and between polls.
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        built = run_builder(cfg, stop=stop)
        logger.info("index builder exiting after %d build(s)%s", built, " (stopped)" if stop.is_set() else "")
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
