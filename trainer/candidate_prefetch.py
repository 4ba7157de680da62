"""Candidates off the critical path: the next micro-batch is searched and packed while this one trains.

A REALM micro-batch needs its query embeddings (device), a MIPS search and the packing of K candidates (host), and
only then its forward and backward (device). In that order the device idles through the host part (13 of a 184 ms
step on one H100 at BERT-base, measured before this existed). With ``train.prefetch_candidates``, the trainer embeds
the *next* micro-batch's queries first, hands its search and packing to a worker thread, then runs this
micro-batch's forward and backward meanwhile (FAISS and torch release the GIL; the packing is short Python).

What it changes: micro-batches of one step are searched with the same weights either way (nothing updates them
between micro-batches), but the next step's first micro-batch is searched with the query tower from before this
step's update: one optimizer step stale. Only the *choice* of candidates is stale; their scores p(z|x) are
recomputed in the forward with the live towers, so the gradient is the exact one for the chosen set, the same
relaxation REALM makes with an index whose document embeddings are hundreds of steps old. It also searches the
index live during the step before, so an index swapped in at a step's start serves from its second micro-batch (or
the step after, without accumulation): ``refresh.max_staleness`` may be exceeded by one step. Off by default.

Exact resume: a checkpoint holds the choice of the micro-batch searched ahead (``pending_choice``), and a resumed
run attaches exactly that choice to it (``restore``), so it trains on what the uninterrupted run did. A run stopped
at ``stop_at_step`` searches the next step's first micro-batch before it stops, for that reason.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterator, Sequence

import torch
from torch import Tensor

from realm.core.prefetch import use_device, with_index
from realm.pretrain.batch import RealmBatch

logger = logging.getLogger(__name__)

StartRetrieval = Callable[[RealmBatch, Tensor | None], Callable[[], RealmBatch]]
"""Called on the training thread with a host batch and ``chosen`` block ids ([B, K-1], or None to search): does the
device part now (query embeddings with the weights as they are) and returns the host part (search and packing,
giving the batch with its candidates, on the host), which may run on another thread, so it must not read anything
the training thread changes (it binds the index when called)."""


class CandidatePipeline:
    """Hands out micro-batches with their candidates attached, on the device; with ``prefetch``, each one's search
    has run in a worker thread while the previous one trained."""

    def __init__(self, start_retrieval: StartRetrieval, device: torch.device, prefetch: bool) -> None:
        self._start_retrieval = start_retrieval
        self.device = with_index(device)
        # note: the worker pins memory for this process's GPU, so that GPU must be current in it (use_device)
        self._pool = ThreadPoolExecutor(
            1, thread_name_prefix="candidates", initializer=use_device, initargs=(self.device,)
        ) if prefetch else None  # fmt: skip
        self._pending: tuple[RealmBatch, Future[RealmBatch]] | None = None
        self._restored: dict[str, Tensor] | None = None
        self.critical_s = 0.0
        """Seconds the training thread spent on candidates (its waits and the device parts); the caller resets it."""

    @property
    def prefetch(self) -> bool:
        return self._pool is not None

    def batches(
        self, micro_batches: Sequence[RealmBatch], following: RealmBatch | None = None
    ) -> Iterator[RealmBatch]:
        """Each of ``micro_batches`` (host) with its candidates, on the device, in order.

        With prefetch, before one is yielded the search of the next has started: the next micro-batch, or after the
        last ``following`` (the next step's first) when the caller passes it. Consume each yielded batch (forward and
        backward) before asking for the next: that is what the search overlaps with.
        """
        for i, batch in enumerate(micro_batches):
            t0 = time.perf_counter()
            ready = self._take(batch)
            upcoming = micro_batches[i + 1] if i + 1 < len(micro_batches) else following
            if self._pool is not None and upcoming is not None:
                host_part = self._start_retrieval(upcoming, None)
                self._pending = (upcoming, self._pool.submit(self._pinned, host_part))
            self.critical_s += time.perf_counter() - t0
            yield ready

    def _pinned(self, host_part: Callable[[], RealmBatch]) -> RealmBatch:
        batch = host_part()
        # note: page-locked, the copy to the GPU is asynchronous and overlaps what is queued before it
        return batch.pin_memory() if self.device.type == "cuda" else batch

    def _take(self, batch: RealmBatch) -> RealmBatch:
        pending, self._pending = self._pending, None
        if pending is not None:
            prefetched, future = pending
            result = future.result()  # note: what the worker raised is raised here, in the training thread
            if prefetched is batch:
                return result.to(self.device, non_blocking=True)
        restored, self._restored = self._restored, None
        chosen = None
        if restored is not None:
            if torch.equal(restored["example_ids"], batch.example_ids):
                chosen = restored["block_ids"]
                logger.info("attached the candidates the checkpoint's run searched ahead for this micro-batch")
            else:
                logger.warning(
                    "the checkpoint's prefetched candidates are for other examples than this process's next ones "
                    "(another number of processes?): searching them with the restored weights instead"
                )
        return self._start_retrieval(batch, chosen)().to(self.device)

    def pending_choice(self) -> dict[str, Tensor] | None:
        """The micro-batch searched ahead, as ``{"example_ids": [B], "block_ids": [B, K-1]}`` (None when there is
        none): what a checkpoint keeps so a resumed run attaches the candidates the uninterrupted one did."""
        if self._pending is None:
            return None
        batch = self._pending[1].result()
        return {"example_ids": batch.example_ids.clone(), "block_ids": batch.candidates.block_ids[:, 1:].clone()}

    def restore(self, choice: dict[str, Tensor]) -> None:
        """Attaches ``choice`` (a checkpoint's ``pending_choice``) to the next micro-batch if it is the one the choice
        was made for (same example ids); any other is searched as usual."""
        self._restored = choice

    def close(self) -> None:
        """Waits for a search under way and stops the worker."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        self._pending = None
