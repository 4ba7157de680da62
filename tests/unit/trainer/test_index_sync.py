"""The trainer's index protocol (one process): swaps between steps, waits only past max_staleness, and a dead builder
or a timeout ends a wait with an error that says where to look, instead of hanging."""

import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from realm.core.errors import UserError
from realm.pretrain.refresh import RefreshConfig
from realm.trainer.builder_process import ChildBuilder
from realm.trainer.index_sync import IndexSync, RunTotals
from realm.trainer.index_watcher import IndexWatcher


class FakeWatcher:
    """Hands over versions (objects with a ``step``) that a test publishes, possibly from another thread."""

    def __init__(self) -> None:
        self.loaded: list[SimpleNamespace] = []
        self.lock = threading.Lock()
        self.heartbeat = None  # a HeartbeatWatch, for a test with a builder's heartbeat

    def publish(self, step: int) -> None:
        with self.lock:
            self.loaded.append(SimpleNamespace(step=step))

    def take(self):
        with self.lock:
            return self.loaded.pop() if self.loaded else None

    def builder_gave_up(self) -> None:
        return None  # note: no builder failure recorded in the run

    def builder_alive(self) -> bool:
        return self.heartbeat is not None and self.heartbeat.builder_alive()  # note: by default no builder's heartbeat

    def wait_for(self, min_step: int, timeout_s: float):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if self.loaded and self.loaded[-1].step >= min_step:
                    return self.loaded.pop()
            time.sleep(0.01)
        return None


def _sync(tmp_path: Path, failure=lambda: None) -> tuple[IndexSync, FakeWatcher]:
    watcher = FakeWatcher()
    accelerator = SimpleNamespace(num_processes=1, is_main_process=True)
    return IndexSync(tmp_path, accelerator, watcher, RunTotals(), failure), watcher


def test_newest_loaded_version_is_swapped_in_between_steps_without_waiting(tmp_path):
    sync, watcher = _sync(tmp_path)
    watcher.publish(0)
    assert sync.wait_for_index(0, step=0, timeout_s=5) < 1
    assert sync.index.step == 0 and sync.totals.num_index_refreshes == 1
    watcher.publish(10)
    sync.maybe_swap(step=12, max_staleness=100, timeout_s=5, target=10)
    assert sync.index.step == 10 and sync.totals.num_index_refreshes == 2
    sync.maybe_swap(step=90, max_staleness=100, timeout_s=5, target=90)  # stale by 80 <= 100: no wait, nothing new
    assert sync.index.step == 10 and sync.totals.refresh_wait_s == 0


def test_past_max_staleness_the_trainer_waits_for_the_newest_export_and_counts_it(tmp_path):
    sync, watcher = _sync(tmp_path)
    watcher.publish(0)
    sync.wait_for_index(0, step=0, timeout_s=5)
    threading.Timer(0.3, watcher.publish, args=(20,)).start()
    sync.maybe_swap(step=21, max_staleness=10, timeout_s=5, target=20)  # the export of step 20, by the schedule
    assert sync.index.step == 20
    assert 0.25 < sync.totals.refresh_wait_s < 3 and sync.totals.index_wait_s >= sync.totals.refresh_wait_s


def test_a_builder_that_exits_during_a_wait_ends_it_with_an_error(tmp_path):
    failure = {"value": None}
    sync, _ = _sync(tmp_path, failure=lambda: failure["value"])
    message = "the index builder exited with code 3 (restarted 2 times already)"
    threading.Timer(0.2, failure.update, kwargs={"value": message}).start()
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"index builder exited with code 3 .*builder\.log"):
        sync.wait_for_index(0, step=0, timeout_s=60)
    assert time.monotonic() - started < 5  # noticed within the next round, not at the timeout


def test_a_builder_that_dies_during_a_wait_is_restarted_there_and_the_wait_goes_on(tmp_path):
    """The restart budget applies while the trainer waits for an index, not only between steps (with a small
    max_staleness the trainer waits most of the time): a real child builder that exits (its config is missing) is
    restarted by the wait, and the wait ends when a version arrives."""
    cfg = RefreshConfig(spawn_builder=True, builder_config=str(tmp_path / "missing.yaml"), builder_restarts=1)
    child = ChildBuilder(cfg, tmp_path, [], num_trainers=1)
    child.start()
    child.process.wait(timeout=60)  # dead before the wait starts, as after a SIGKILL
    sync, watcher = _sync(tmp_path, failure=child.failure)

    def publish_after_the_restart():
        while child.restarts == 0:
            time.sleep(0.05)
        watcher.publish(0)

    threading.Thread(target=publish_after_the_restart, daemon=True).start()
    sync.wait_for_index(0, step=0, timeout_s=60)
    assert sync.index.step == 0 and child.restarts == 1
    child.stop()


def test_no_index_within_the_timeout_is_an_error(tmp_path):
    sync, _ = _sync(tmp_path)
    with pytest.raises(TimeoutError, match="no index of step >= 0 appeared"):
        sync.wait_for_index(0, step=0, timeout_s=0.5)


def test_a_builder_at_work_is_waited_for_past_the_timeout_and_one_whose_heartbeat_stops_is_not(tmp_path, caplog):
    """The first index of a large corpus outlasts any fixed timeout (1M blocks: about 20 minutes on 2 CPU cores): the
    wait goes on while the builder's heartbeat (``index/BUILDER_HEARTBEAT``) moves, and ends once it stops."""
    from realm.index.builder_heartbeat import HeartbeatWatch, beating

    sync, watcher = _sync(tmp_path)
    watcher.heartbeat = HeartbeatWatch(tmp_path, stale_s=1.0)
    with beating(tmp_path, interval_s=0.1) as path:
        assert IndexWatcher(tmp_path).builder_alive()  # the trainer's watcher reads the same file
        threading.Timer(2.0, watcher.publish, args=(0,)).start()
        with caplog.at_level("INFO", logger="realm.trainer.index_sync"):
            waited = sync.wait_for_index(0, step=0, timeout_s=0.5)
    assert waited > 1.9 and sync.index.step == 0
    assert "no index of step >= 0 after 0 s, but the builder is at work" in caplog.text
    assert not path.exists() and not IndexWatcher(tmp_path).builder_alive()  # the builder let go: no heartbeat
    # a builder killed with SIGKILL leaves its heartbeat behind, unmoved: the wait ends once it is stale
    path.touch()
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="no builder's heartbeat moved in the last 60 s"):
        sync.wait_for_index(1, step=1, timeout_s=0.2)
    assert 0.9 < time.monotonic() - started < 4


def test_a_builder_that_gave_up_ends_the_wait_at_once_with_its_reason_and_an_older_record_is_ignored(tmp_path):
    """A standalone builder's failure reaches the trainer through the record in the run (``index/BUILD_FAILED``); one
    written before this trainer started (a failure the user has since fixed) does not stop it."""
    from realm.index.build_failure import record_build_failure

    record_build_failure(tmp_path, 0, "gave up building the index of retriever step 0: an earlier failure")
    watcher = IndexWatcher(tmp_path, 0.05)
    accelerator = SimpleNamespace(num_processes=1, is_main_process=True)
    sync = IndexSync(tmp_path, accelerator, watcher, RunTotals(), lambda: None)
    reason = "gave up building the index of retriever step 0 after 4 attempts: /r/index: no space left on device"
    threading.Timer(1.5, record_build_failure, args=(tmp_path, 0, reason)).start()
    started = time.monotonic()
    with pytest.raises(UserError) as caught:
        sync.wait_for_index(0, step=0, timeout_s=60)
    assert 1.4 < time.monotonic() - started < 5
    assert str(caught.value).startswith(f"the index builder {reason}") and "\n" not in str(caught.value)


def test_reproducible_swaps_go_live_at_their_step_whatever_the_builder_speed(tmp_path):
    """refresh.swap_lag: a version loaded early waits for its step; one that is late is waited for at its step."""
    sync, watcher = _sync(tmp_path)
    watcher.publish(0)
    sync.start_at(0, step=0, timeout_s=5)
    watcher.publish(10)  # a fast builder: v10 is loaded at step 11, due at step 14 (lag 4)
    for step in range(11, 14):
        sync.swap_due(step, due=0, timeout_s=5)
        assert sync.index.step == 0
    sync.swap_due(14, due=10, timeout_s=5)
    assert sync.index.step == 10 and sync.totals.refresh_wait_s < 0.2
    threading.Timer(0.3, watcher.publish, args=(20,)).start()  # a slow builder: v20 arrives after its step
    sync.swap_due(24, due=20, timeout_s=5)
    assert sync.index.step == 20 and sync.totals.refresh_wait_s > 0.25


def test_a_resumed_run_restarts_from_the_version_its_step_searched(tmp_path):
    sync, watcher = _sync(tmp_path)
    watcher.load_step = {10: SimpleNamespace(step=10)}.get  # v10 on disk, while CURRENT already names v20
    watcher.publish(20)
    sync.start_at(10, step=22, timeout_s=5)
    assert sync.index.step == 10
    sync.swap_due(23, due=10, timeout_s=5)
    assert sync.index.step == 10 and sync.pending.step == 20  # loaded, held back until its step
    sync.swap_due(24, due=20, timeout_s=5)
    assert sync.index.step == 20


def test_a_pruned_version_on_resume_falls_back_to_waiting_with_a_warning(tmp_path, caplog):
    sync, watcher = _sync(tmp_path)
    watcher.load_step = lambda step: None
    watcher.publish(20)
    sync.start_at(10, step=22, timeout_s=5)
    assert sync.index.step == 20 and "cannot be loaded" in caplog.text
