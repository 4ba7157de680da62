"""The builder's heartbeat: how a trainer waiting for an index tells a builder at work from no builder at all.

How long a build takes grows with the corpus: the first index of 1M blocks took about 20 minutes on 2 CPU cores (the
scale rehearsal), and 21M blocks at the H200's 6,245 blocks/s take about an hour on one GPU, so no fixed
``refresh.initial_index_timeout_s`` suits every corpus. While it holds a run, the builder's main process touches
``RUN/index/BUILDER_HEARTBEAT`` every ``HEARTBEAT_INTERVAL_S`` seconds from a daemon thread (``beating``), and
removes it when it lets go. A trainer waiting for an index gives up only once its timeout has passed *and* the
heartbeat has not moved for ``HEARTBEAT_STALE_S`` seconds (``HeartbeatWatch``): a builder killed with SIGKILL leaves
the file behind, and it goes stale. The trainer compares the file's mtime with the one it saw before, on its own
clock, so the clock of another node on a shared file system never matters.

What it does not catch: a builder whose process lives but whose build hangs keeps beating. A build that fails says so
at once instead (``realm.index.build_failure``), and a child builder that dies is seen by its exit.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from realm.run.layout import BUILDER_HEARTBEAT, index_dir

logger = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_S = 10.0
HEARTBEAT_STALE_S = 60.0
"""Six missed beats: a builder this late is taken for gone (a busy file system may delay a touch by seconds)."""


@contextlib.contextmanager
def beating(run_dir: str | Path, interval_s: float = HEARTBEAT_INTERVAL_S) -> Iterator[Path]:
    """Touches ``RUN/index/BUILDER_HEARTBEAT`` now and every ``interval_s`` seconds until the block ends, then removes
    it; yields its path. A touch that fails (a full or read-only disk) is logged once and retried at the next beat."""
    path = index_dir(run_dir) / BUILDER_HEARTBEAT
    path.parent.mkdir(parents=True, exist_ok=True)
    stop, warned = threading.Event(), threading.Event()

    def touch() -> None:
        try:
            path.touch()
        except OSError as err:
            if not warned.is_set():
                logger.warning("cannot touch the heartbeat %s: %s (a waiting trainer may give up)", path, err)
                warned.set()

    def beat() -> None:
        while not stop.wait(interval_s):
            touch()

    touch()  # note: before the block starts, so that a trainer looking at once already sees a builder at work
    thread = threading.Thread(target=beat, name="builder-heartbeat", daemon=True)
    thread.start()
    try:
        yield path
    finally:
        stop.set()
        thread.join()
        path.unlink(missing_ok=True)


class HeartbeatWatch:
    """The trainer's view of the heartbeat: ``builder_alive()`` is True while the file's mtime has changed within the
    last ``stale_s`` seconds of this process's ``clock``; a file seen for the first time counts as a change."""

    def __init__(
        self, run_dir: str | Path, stale_s: float = HEARTBEAT_STALE_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.path = index_dir(run_dir) / BUILDER_HEARTBEAT
        self.stale_s = stale_s
        self.clock = clock
        self._mtime: int | None = None
        self._changed_at = -math.inf

    def builder_alive(self) -> bool:
        try:
            mtime = self.path.stat().st_mtime_ns
        except OSError:
            return False  # note: no builder holds the run (or it let go)
        now = self.clock()
        if mtime != self._mtime:
            self._mtime, self._changed_at = mtime, now
        return now - self._changed_at <= self.stale_s
