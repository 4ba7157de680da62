"""The trainer's side of index refresh: a daemon thread that loads new index versions off the critical path.

The thread polls ``RUN/index/CURRENT``; when it names a version newer than the last one loaded, the thread loads and
verifies it (checksums included, which takes seconds at full scale) and leaves it in a one-slot mailbox. The loop
``take()``s it between steps, so a refresh never stalls a step. A version that fails verification is logged and
skipped for good (published versions are immutable), and the trainer keeps the index it has.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from realm.core.errors import UserError
from realm.index.build_failure import builder_gave_up
from realm.index.builder_heartbeat import HeartbeatWatch
from realm.index.mips import IndexConfig
from realm.index.versions import PublishedIndex, load_index_version
from realm.run.layout import INDEX_PREFIX, index_dir
from realm.run.live_index import IndexVersionError, current_index_version
from realm.run.publication import folder_name, read_manifest

logger = logging.getLogger(__name__)


class IndexWaitTimeout(UserError, TimeoutError):
    """No index the trainer needs appeared in time (no builder running?); one line, exit code 2."""


class IndexWatcher:
    """Polls ``RUN/index/CURRENT`` in a daemon thread; ``take()``/``wait_for()`` hand over loaded versions.

    Args:
        run_dir: the run directory shared with the builder.
        poll_interval_s: seconds between looks at CURRENT.
        index_cfg: search parameters (nprobe, efSearch) applied to each loaded index.
        verify: recompute file checksums when loading (sizes are always checked).
        corpus_fingerprint: the trainer's own blocks (``realm.index.build_version.blocks_fingerprint``); a version
            built over other blocks is refused, since its row ids would name the wrong blocks.
    """

    def __init__(
        self,
        run_dir: str | Path,
        poll_interval_s: float = 1.0,
        *,
        index_cfg: IndexConfig | None = None,
        verify: bool = True,
        corpus_fingerprint: str | None = None,
    ) -> None:
        if poll_interval_s <= 0:
            raise ValueError(f"poll_interval_s must be positive, got {poll_interval_s}")
        self.run_dir = Path(run_dir)
        self.poll_interval_s = poll_interval_s
        self.index_cfg = index_cfg
        self.verify = verify
        self.corpus_fingerprint = corpus_fingerprint
        # note: one Condition guards the mailbox and the closed flag; waiting on it never spins.
        self._cond = threading.Condition()
        self._mailbox: PublishedIndex | None = None
        self._closed = False
        self._loaded_step = -1  # newest step loaded by the thread (taken or not); touched by the thread only
        self._failed: set[str] = set()  # version folders that failed to load; thread only
        self._thread: threading.Thread | None = None
        self._created = time.time()
        self._heartbeat = HeartbeatWatch(self.run_dir)

    def start(self) -> "IndexWatcher":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="index-watcher", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        """Stops the thread (waiting for a load in progress to finish) and drops an untaken version."""
        with self._cond:
            self._closed = True
            self._mailbox = None
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def __enter__(self) -> "IndexWatcher":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def take(self) -> PublishedIndex | None:
        """The newest loaded version not taken yet, or None; never blocks on I/O."""
        with self._cond:
            published, self._mailbox = self._mailbox, None
            return published

    def wait_for(self, min_step: int, timeout_s: float | None = None) -> PublishedIndex | None:
        """Blocks until an untaken version with ``step >= min_step`` is loaded and takes it.

        Returns None on timeout or when the watcher is closed; an older untaken version stays in the mailbox.
        """

        def ready() -> bool:
            return self._closed or (self._mailbox is not None and self._mailbox.step >= min_step)

        with self._cond:
            if not self._cond.wait_for(ready, timeout=timeout_s) or self._closed:
                return None
            published, self._mailbox = self._mailbox, None
            return published

    def load(self, version: Path, manifest: dict) -> PublishedIndex | None:
        """Loads the published ``version`` with the watcher's checks and settings, or logs why not and returns None
        (a bad version must never kill the thread: the trainer keeps the last good index)."""
        try:
            # note: the fingerprint is in the manifest, so a version over other blocks is refused before it is loaded
            found = manifest.get("corpus_fingerprint")
            if self.corpus_fingerprint is not None and found != self.corpus_fingerprint:
                raise IndexVersionError(
                    f"{version}: built over other blocks (corpus fingerprint {found}, the trainer's data.blocks "
                    f"have {self.corpus_fingerprint})"
                )
            return load_index_version(version, verify=self.verify, cfg=self.index_cfg)
        except Exception as err:
            logger.warning("skipping index version %s: %s", version.name, err)
            return None

    def load_step(self, step: int) -> PublishedIndex | None:
        """The published version of retriever step ``step`` loaded now (not through the mailbox), or None when it is
        not published (never built, or pruned) or fails its checks; a resumed run restarts from the version its
        checkpoint searched this way, whichever version CURRENT names."""
        version = index_dir(self.run_dir) / folder_name(INDEX_PREFIX, step)
        manifest = read_manifest(version)
        return self.load(version, manifest) if manifest is not None else None

    def builder_gave_up(self) -> str | None:
        """Why the run's builder gave up on a build, if it did so since this watcher (the trainer) started, else None:
        how a standalone builder's failure reaches the trainer (``realm.index.build_failure``)."""
        return builder_gave_up(self.run_dir, self._created)

    def builder_alive(self) -> bool:
        """Whether a builder holds the run and its heartbeat moved within the last minute (``HeartbeatWatch``): a
        wait for an index outlasts its timeout while one does, since a build's time grows with the corpus."""
        return self._heartbeat.builder_alive()

    # ------------------------------------------------------------------------------------------ thread side

    def _poll_once(self) -> None:
        version = current_index_version(self.run_dir)
        manifest = read_manifest(version) if version is not None else None
        if manifest is None or int(manifest.get("step", -1)) <= self._loaded_step:
            return
        key = f"{version.name}@{manifest.get('created')}"  # note: a same-step rebuild gets a fresh chance
        if key in self._failed:
            return
        published = self.load(version, manifest)
        if published is None:
            self._failed.add(key)
            return
        self._loaded_step = published.step
        with self._cond:
            if not self._closed:
                self._mailbox = published  # note: replaces an older untaken version; only the newest matters
                self._cond.notify_all()
        logger.info("loaded index version %s (%d vectors)", version.name, published.num_vectors)

    def _run(self) -> None:
        while True:
            try:
                self._poll_once()
            except Exception:
                logger.exception("index watcher poll failed; retrying")
            with self._cond:
                if self._cond.wait_for(lambda: self._closed, timeout=self.poll_interval_s):
                    return
