"""The trainer's index watcher: picks up new versions in the background, skips bad ones, never spins."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from realm.index import versions
from realm.run import layout, live_index, publication
from realm.trainer.index_watcher import IndexWatcher
from tests.helpers import publish_index

POLL_S = 0.01


def publish_random(run_dir: Path, step: int, *, make_current: bool = True) -> Path:
    version = publish_index(run_dir, np.random.default_rng(step).standard_normal((20, 8)).astype(np.float32), step)
    if make_current:
        live_index.set_current_index(run_dir, version)
    return version


@pytest.fixture()
def watcher(tmp_path):
    with IndexWatcher(tmp_path, POLL_S) as w:
        yield w


def test_picks_up_each_newly_published_version(tmp_path, watcher):
    assert watcher.take() is None
    publish_random(tmp_path, 5)
    first = watcher.wait_for(5, timeout_s=10)
    assert first is not None and first.step == 5 and first.num_vectors == 20
    assert watcher.take() is None  # handed over once
    publish_random(tmp_path, 10)
    second = watcher.wait_for(6, timeout_s=10)
    assert second is not None and second.step == 10


def test_take_returns_the_newest_loaded_version(tmp_path, watcher):
    publish_random(tmp_path, 1)
    assert watcher.wait_for(1, timeout_s=10).step == 1
    publish_random(tmp_path, 2)
    deadline = time.monotonic() + 10
    taken = None
    while taken is None and time.monotonic() < deadline:
        taken = watcher.take()
        time.sleep(POLL_S)
    assert taken is not None and taken.step == 2


def test_corrupt_version_is_skipped_and_the_previous_one_stays(tmp_path, watcher, caplog):
    publish_random(tmp_path, 1)
    good = watcher.wait_for(1, timeout_s=10)
    bad = publish_random(tmp_path, 2, make_current=False)
    data = bytearray((bad / versions.EMBEDDINGS_FILE).read_bytes())
    data[-1] ^= 0xFF
    (bad / versions.EMBEDDINGS_FILE).write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="realm.trainer.index_watcher"):
        live_index.set_current_index(tmp_path, bad)
        assert watcher.wait_for(2, timeout_s=0.3) is None
    assert any("skipping index version v-00000002" in r.getMessage() for r in caplog.records)
    assert good.step == 1 and good.num_vectors == 20  # what the trainer holds is untouched
    publish_random(tmp_path, 3)  # a later good version is still picked up
    assert watcher.wait_for(3, timeout_s=10).step == 3


def test_wait_for_times_out_cleanly_without_an_index(watcher):
    start = time.monotonic()
    assert watcher.wait_for(0, timeout_s=0.2) is None
    assert 0.2 <= time.monotonic() - start < 2.0


def test_wait_for_leaves_an_older_version_in_the_mailbox(tmp_path, watcher):
    publish_random(tmp_path, 3)
    assert watcher.wait_for(100, timeout_s=0.3) is None
    assert watcher.take().step == 3


def test_close_wakes_a_blocked_waiter(tmp_path):
    watcher = IndexWatcher(tmp_path, POLL_S).start()
    result: list = []
    waiter = threading.Thread(target=lambda: result.append(watcher.wait_for(1, timeout_s=None)))
    waiter.start()
    time.sleep(0.05)
    watcher.close()
    waiter.join(timeout=5)
    assert not waiter.is_alive() and result == [None]
    assert not watcher._thread.is_alive()


def test_a_version_built_over_other_blocks_is_refused(tmp_path, caplog):
    publish_random(tmp_path, 3)  # corpus fingerprint "c"
    with caplog.at_level(logging.WARNING), IndexWatcher(tmp_path, POLL_S, corpus_fingerprint="other") as w:
        assert w.wait_for(0, timeout_s=0.3) is None
    assert "built over other blocks" in caplog.text
    with IndexWatcher(tmp_path, POLL_S, corpus_fingerprint="c") as w:
        assert w.wait_for(3, timeout_s=10).step == 3


@pytest.mark.parametrize("name", ["/etc", "../../elsewhere/v-00000001", "v-00000001/../../x", "not-a-version"])
def test_current_naming_anything_but_a_version_inside_the_run_is_not_followed(tmp_path, name, caplog):
    publish_random(tmp_path, 1)
    publication.write_pointer(layout.index_dir(tmp_path) / publication.CURRENT, name)
    with caplog.at_level(logging.ERROR):
        assert live_index.current_index_version(tmp_path) is None
    assert "not a version folder inside" in caplog.text
