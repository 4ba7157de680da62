"""Which index version the trainer searches, agreed across its processes; the only place the trainer waits for one.

The index is never refreshed inside a step. The builder (another process) publishes new versions; each process's
watcher thread loads them off the critical path; between steps ``IndexSync.maybe_swap`` swaps the newest one in and
blocks only when the live index is more than ``max_staleness`` steps old (or when there is none yet). Which step a
version goes live at then depends on the builder's speed; ``IndexSync.swap_due`` (``refresh.swap_lag``) instead makes
each version live at a fixed step, so that two runs of one seed train on the same indexes.

With N processes each process retrieves from its own read-only copy of the index. A version goes live only in the
step in which every process has loaded that same version (one all-gather of an int per step), so all processes always
search the same index and swap in the same step. Waiting is collective too: every process takes part in each round of
the wait (about one a second), a failure seen by any of them (the child builder gone, a timeout) ends the wait on all
of them at once, and the staleness target (the newest export by the schedule) is the same on every process.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from accelerate import Accelerator

from realm.index.build_failure import IndexBuildError
from realm.index.builder_heartbeat import HEARTBEAT_STALE_S
from realm.index.versions import PublishedIndex
from realm.trainer.index_watcher import IndexWaitTimeout, IndexWatcher
from realm.training.lineage import use_index_version

logger = logging.getLogger(__name__)

_KEEP_WAITING, _BUILDER_EXITED, _TIMED_OUT = 0, 1, 2


@dataclass
class RunTotals:
    """Running totals kept in checkpoints so a resumed run reports whole-run figures."""

    wall_s: float = 0.0
    index_wait_s: float = 0.0
    """All time blocked on the index: the first one and refreshes past ``max_staleness``."""
    refresh_wait_s: float = 0.0
    """The part of ``index_wait_s`` spent on refreshes (everything after the first index of an invocation)."""
    num_index_refreshes: int = 0
    num_exports: int = 0


class IndexSync:
    """The live index of one trainer process and the collective protocol that changes it.

    Args:
        run_dir: the run directory (exports and published index versions).
        accelerator: the trainer's; its processes agree on every swap.
        watcher: this process's loader of published versions (started by the caller).
        totals: the run's totals; waits and swaps are added to them.
        builder_failure: None while the child builder runs (or when there is no child); it restarts a builder that
            died while restarts remain, and returns what went wrong once none remain (``ChildBuilder.failure``).
    """

    def __init__(
        self,
        run_dir: Path,
        accelerator: Accelerator,
        watcher: IndexWatcher,
        totals: RunTotals,
        builder_failure: Callable[[], str | None],
    ) -> None:
        self.run_dir = run_dir
        self.accelerator = accelerator
        self.watcher = watcher
        self.totals = totals
        self.builder_failure = builder_failure
        self.failure: str | None = None
        self.index: PublishedIndex | None = None
        self.pending: PublishedIndex | None = None
        """A version this process's watcher loaded, newer than ``index``, not yet agreed on by all processes."""

    def gather_ints(self, *values: int) -> torch.Tensor:
        """[num_processes, len(values)]: every process's ``values`` in rank order (one all-gather; none when alone)."""
        local = torch.tensor([values], dtype=torch.long)
        if self.accelerator.num_processes == 1:
            return local
        return self.accelerator.gather(local.to(self.accelerator.device)).cpu()

    def _take_loaded(self, step: int, published: PublishedIndex | None = None) -> int:
        """Keeps the newest version the watcher has loaded as ``pending``; returns its step (-1: none pending).

        A version built from weights after ``step`` (a killed run's export, published by a builder that outlived it)
        is never used: an uninterrupted run could not have had it, so a resumed run must not either.
        """
        published = published if published is not None else self.watcher.take()
        if published is not None and published.step > step:
            logger.warning("ignoring index v%d: built from weights after this run's step %d", published.step, step)
            published = None
        newest = max(self.pending.step if self.pending else -1, self.index.step if self.index else -1)
        if published is not None and published.step > newest:
            self.pending = published
        return self.pending.step if self.pending is not None else -1

    def _swap_if_agreed(self, held: torch.Tensor, step: int, min_step: int = 0) -> bool:
        """Swaps ``pending`` in when every process holds the same version of step >= ``min_step`` ([N] ``held``)."""
        version = int(held[0])
        if version < max(min_step, 0) or not bool((held == version).all()):
            return False
        published, self.pending = self.pending, None
        self.index = published
        use_index_version(self.accelerator, published)  # note: an input of the W&B run (main process; else no-op)
        self.totals.num_index_refreshes += 1
        logger.info("step %d: swapped in index v%d (staleness %d)", step, published.step, step - published.step)
        return True

    def _wait_problem(self, timed_out: bool) -> int:
        # note: a child builder that exited, even cleanly, will publish nothing more; while restarts remain it is
        # restarted here, since with a small max_staleness the trainer spends most of its time in this wait. A
        # standalone builder that gave up says so in the run directory (a child's record is read by builder_failure)
        self.failure = self.builder_failure() or self.watcher.builder_gave_up()
        if self.failure is not None:
            return _BUILDER_EXITED
        # note: looked at every round, so that the heartbeat's last move is known when the timeout comes; a build's
        # time grows with the corpus, so a builder at work is waited for past the timeout (builder_heartbeat)
        busy = self.watcher.builder_alive()
        return _TIMED_OUT if timed_out and not busy else _KEEP_WAITING

    def wait_for_index(self, min_step: int, step: int, timeout_s: float) -> float:
        """Blocks until every process has loaded one same version of step >= ``min_step``, swaps it in, and returns
        the seconds waited (also added to ``totals.index_wait_s``).

        Collective: in each round (at most about a second) every process reports the version it holds and whether
        it gives up, so all of them leave in the same round, swapping the same version or raising the same error.
        A process ahead of the others (it has already seen a newer version) makes them wait for that one.
        """
        start = time.perf_counter()
        want, said_busy = min_step, False
        while True:
            held = self._take_loaded(step)
            if held < want:
                held = self._take_loaded(step, self.watcher.wait_for(want, timeout_s=1.0))
            # note: a process that holds what it needs does not give up, e.g. on a builder that published it and exited
            timed_out = time.perf_counter() - start > timeout_s
            problem = self._wait_problem(timed_out) if held < want else _KEEP_WAITING
            rows = self.gather_ints(held, problem)
            problem = int(rows[:, 1].max())
            if timed_out and held < want and problem == _KEEP_WAITING and not said_busy:
                logger.info("no index of step >= %d after %.0f s, but the builder is at work (its heartbeat "
                            "moves): waiting on", min_step, timeout_s)  # fmt: skip
                said_busy = True
            if problem == _BUILDER_EXITED:
                raise IndexBuildError(
                    f"{self.failure or 'the index builder failed on another process'} (the trainer was waiting for "
                    f"an index; see {self.run_dir / 'builder.log'})"
                )
            if problem == _TIMED_OUT:
                raise IndexWaitTimeout(
                    f"no index of step >= {min_step} appeared in {self.run_dir / 'index'} within {timeout_s:.0f} s "
                    f"and no builder's heartbeat moved in the last {HEARTBEAT_STALE_S:.0f} s; is the builder running?"
                )
            if self._swap_if_agreed(rows[:, 0], step, min_step):
                break
            want = max(min_step, int(rows[:, 0].max()))
        waited = time.perf_counter() - start
        self.totals.index_wait_s += waited
        return waited

    def start_at(self, due: int, step: int, timeout_s: float) -> None:
        """The first index of an invocation: version ``due`` (the one its checkpoint searched, or the initial one). A
        resumed run loads it from disk (its checkpoint pins it, ``realm.run.layout.pinned_steps``), since CURRENT may
        already name a newer version that goes live only later."""
        if step > 0:
            published = self.watcher.load_step(due)
            if int(self.gather_ints(int(published is not None))[:, 0].min()) == 1:
                self.index = published  # note: not a refresh: the version the run searched when it saved
                use_index_version(self.accelerator, published)
                logger.info("step %d: resumed on index v%d", step, due)
                return
            logger.warning(
                "index v%d, which this run searched at step %d, cannot be loaded (removed by hand?): waiting "
                "for a newer one, so steps up to the next swap differ from an uninterrupted run", due, step
            )
        self.wait_for_index(due, step, timeout_s)

    def swap_due(self, step: int, due: int, timeout_s: float) -> None:
        """Reproducible refresh (``refresh.swap_lag``): before ``step``, make version ``due`` live (the export the
        schedule made ``swap_lag`` steps ago), waiting for it if it is late; a version loaded earlier waits in
        ``pending`` until its step. No newer export exists yet (the lag is below the export interval), so the
        version waited for is exactly ``due``."""
        if due <= self.index.step:
            self._take_loaded(step)  # note: keeps the mailbox drained; nothing goes live before its step
            return
        if not self._swap_if_agreed(self.gather_ints(self._take_loaded(step))[:, 0], step, min_step=due):
            self.totals.refresh_wait_s += self.wait_for_index(due, step, timeout_s)
        if self.index.step != due:
            raise RuntimeError(f"step {step}: index v{self.index.step} went live where v{due} was due")

    def maybe_swap(self, step: int, max_staleness: int, timeout_s: float, target: int) -> None:
        """Between steps: swap in a newer index once every process has it; block only past ``max_staleness``, then
        until version ``target`` (the newest export the run has made by ``step``) or a newer one is live."""
        self._swap_if_agreed(self.gather_ints(self._take_loaded(step))[:, 0], step)
        staleness = step - self.index.step
        # note: every process takes this branch together (same step, same index, same target). The target is the
        # schedule's, not the newest export on disk: a run resumed from a checkpoint saved at a refresh step waits for
        # that step's export, as the uninterrupted run did, whatever a builder removed or a killed run left behind
        if staleness > max_staleness and target > self.index.step:
            logger.info("index is %d steps stale (> %d): waiting for v%d", staleness, max_staleness, target)
            self.totals.refresh_wait_s += self.wait_for_index(target, step, timeout_s)
