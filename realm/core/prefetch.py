"""A background thread that runs an iterator ahead of its consumer, so the device never waits for the next input.

Reading, packing and pinning a batch are Python and Arrow work; torch's kernels release the GIL, so a producer
thread overlaps them with the forward pass that consumes the previous batch. Items arrive in order; an exception
in the producer is raised in the consumer at the point where its item would have come; closing (or leaving the
``with`` block early, e.g. on a cancelled build) stops the producer after at most the item it is making.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")

_DONE = object()
_POLL_S = 0.1


class Prefetcher(Generic[T]):
    """Iterates ``source`` in a daemon thread, at most ``depth`` items ahead of the consumer."""

    def __init__(self, source: Iterable[T], depth: int = 2, name: str = "prefetch") -> None:
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, args=(iter(source),), name=name, daemon=True)
        self._thread.start()

    def _put(self, item: object) -> bool:
        """Blocks until there is room or the consumer closed; False when closed."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self, source: Iterator[T]) -> None:
        try:
            for item in source:
                if not self._put(item):
                    return
        except BaseException as exc:  # note: handed to the consumer, raised there
            self._put(_Failure(exc))
            return
        self._put(_DONE)

    def __iter__(self) -> Iterator[T]:
        while True:
            item = self._queue.get()
            if item is _DONE:
                return
            if isinstance(item, _Failure):
                raise item.exc
            yield item

    def close(self) -> None:
        """Stops the producer and waits for its thread."""
        self._stop.set()
        self._thread.join()

    def __enter__(self) -> Prefetcher[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc
