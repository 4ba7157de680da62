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

import torch

T = TypeVar("T")

_DONE = object()
_POLL_S = 0.1


class Prefetcher(Generic[T]):
    """Iterates ``source`` in a daemon thread, at most ``depth`` items ahead of the consumer.

    ``device``: a CUDA device the thread makes current before it starts (see ``use_device``) when it pins memory.
    """

    def __init__(
        self, source: Iterable[T], depth: int = 2, name: str = "prefetch", device: torch.device | None = None
    ) -> None:
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._device = with_index(device)  # note: resolved here, in the thread whose current device is meant
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
            use_device(self._device)
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


def use_device(device: torch.device | None) -> None:
    """Makes ``device`` the calling thread's current CUDA device (nothing for None or a CPU device).

    The current device is per thread and a new thread starts on device 0, so a worker that pins memory for, or copies
    to, another process's GPU must say which: otherwise every process of a node opens a context on GPU 0.
    """
    if device is not None and device.type == "cuda":
        torch.cuda.set_device(device)


def with_index(device: torch.device | None) -> torch.device | None:
    """``device`` with its index: a bare ``cuda`` means the calling thread's current device (call it in the thread
    that owns the work, not in a worker, which starts on device 0)."""
    if device is not None and device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device
