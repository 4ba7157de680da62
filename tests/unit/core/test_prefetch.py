"""The background loader: items in order, a producer's exception raised in the consumer, the producer running ahead
of the consumer by at most ``depth``, stopped (its thread gone) when the consumer leaves early, and on its owner's GPU."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from realm.core.prefetch import Prefetcher, with_index


def _threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


def test_items_arrive_in_order_and_the_thread_ends():
    with Prefetcher(range(100), depth=3, name="t-order") as items:
        assert list(items) == list(range(100))
    assert not _threads("t-order")


def test_the_producer_runs_ahead_by_depth_while_the_consumer_works():
    made: list[int] = []

    def source():
        for i in range(10):
            made.append(i)
            yield i

    with Prefetcher(source(), depth=2, name="t-ahead") as items:
        it = iter(items)
        assert next(it) == 0
        deadline = time.monotonic() + 5
        while len(made) < 4 and time.monotonic() < deadline:  # 0 taken, 1-2 queued, 3 made and waiting for room
            time.sleep(0.01)
        time.sleep(0.1)
        assert len(made) == 4, made  # ahead, but never more than depth (+ the one blocked on a full queue)
        assert list(it) == list(range(1, 10))


def test_an_exception_in_the_producer_is_raised_where_its_item_would_come():
    def source():
        yield 1
        yield 2
        raise KeyError("block 7 unreadable")

    got = []
    with pytest.raises(KeyError, match="block 7"):
        with Prefetcher(source(), name="t-fail") as items:
            for item in items:
                got.append(item)
    assert got == [1, 2]
    assert not _threads("t-fail")


def test_leaving_early_stops_the_producer():
    made: list[int] = []

    def endless():
        i = 0
        while True:
            made.append(i)
            yield i
            i += 1

    with Prefetcher(endless(), depth=2, name="t-stop") as items:
        for item in items:
            if item == 5:
                break
    assert not _threads("t-stop")
    count = len(made)
    time.sleep(0.2)
    assert len(made) == count <= 9  # nothing made after close


def test_depth_must_be_positive():
    with pytest.raises(ValueError, match="depth"):
        Prefetcher([], depth=0)


def test_a_worker_makes_the_owner_s_cuda_device_current_before_it_works(monkeypatch):
    """A new thread starts on CUDA device 0; a worker that pins memory for another GPU must switch to it first, else
    every process of a node opens a context on GPU 0. (The logic only: torch.cuda is stood in for.)"""
    current = {"thread": 2}  # the owner's current device; a new thread's would be 0
    made_current = []
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current["thread"])
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: made_current.append((threading.current_thread().name, d)))

    assert with_index(torch.device("cuda")) == torch.device("cuda", 2)  # resolved in the owner's thread
    assert with_index(torch.device("cuda", 1)) == torch.device("cuda", 1) and with_index(None) is None
    with Prefetcher(iter([1, 2]), depth=1, name="loader", device=torch.device("cuda")) as items:
        assert list(items) == [1, 2]
    with Prefetcher(iter([1]), depth=1, name="cpu-loader", device=torch.device("cpu")) as items:
        assert list(items) == [1]
    assert made_current == [("loader", torch.device("cuda", 2))]  # and nothing for a CPU loader
