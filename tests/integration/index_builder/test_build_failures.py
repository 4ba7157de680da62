"""A build that fails: a full disk or a read-only run directory is one line naming the path (no traceback, no
SIGBUS), and the published state stays as it was; a failure that may pass (no space for a moment) is retried with
backoff; one that cannot (a bad token id, retries spent) is recorded in the run and ends the builder in one line, and
a trainer waiting for that version stops at once with the builder's reason. Full disks and read-only folders are
simulated (the tests may run as root, and cannot fill a real disk)."""

from __future__ import annotations

import errno
import os
import shutil
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import datasets
import faiss
import pytest

from realm.core.errors import USER_ERROR_EXIT_CODE, UserError, run_command
from realm.data.blocks import BLOCK_FEATURES
from realm.index import mips
from realm.index_builder.watch import IndexBuilderConfig, main, run_builder
from realm.run import layout, live_index, publication
from realm.trainer.index_sync import IndexSync, RunTotals
from realm.trainer.index_watcher import IndexWatcher
from tests.helpers import export_tiny, make_run

NUM_BLOCKS = 40
FAST_RETRIES = ["--build_retries=2", "--retry_backoff_s=0.05", "--poll_interval_s=0.02"]


@pytest.fixture()
def run(tmp_path) -> tuple[Path, Path, Path]:
    return make_run(tmp_path, NUM_BLOCKS)


def _index(run: tuple[Path, Path, Path], *args: str, capsys) -> tuple[int, list[str], str]:
    """``realm index --run_dir RUN ARGS`` in this process: (exit code, its error lines, all of stderr)."""
    code = run_command("realm index", main, [f"--run_dir={run[0]}", *args])
    err = capsys.readouterr().err
    return code, [line for line in err.splitlines() if line.startswith("realm index: error:")], err


def _published(run_dir: Path) -> list[str]:
    return [p.name for _, p in publication.list_published(layout.index_dir(run_dir), layout.INDEX_PREFIX)]


def _leftovers(run_dir: Path) -> list[str]:
    return [p.name for p in layout.index_dir(run_dir).iterdir() if p.name.startswith((".staging", ".trash"))]


def _failure_record(run_dir: Path) -> Path:
    return layout.index_dir(run_dir) / layout.BUILD_FAILED


def _full_disk(monkeypatch, free: int = 1024) -> None:
    usage = shutil.disk_usage("/")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=free))


def _fail_index_writes(monkeypatch, times: int, code: int = errno.ENOSPC) -> list[int]:
    """``FaissIndex.save`` raises ``OSError(code)`` the first ``times`` calls; returns the list of calls made."""
    calls: list[int] = []
    save = mips.FaissIndex.save

    def failing(self, path):
        calls.append(1)
        if len(calls) <= times:
            raise OSError(code, os.strerror(code), str(path))
        return save(self, path)

    monkeypatch.setattr(mips.FaissIndex, "save", failing)
    return calls


def test_a_full_disk_stops_the_builder_before_it_maps_the_embeddings_in_one_line_and_the_run_resumes(
    run, monkeypatch, capsys
):
    run_dir = run[0]
    export_tiny(run_dir, 10, run[1], run[2])
    assert run_builder(IndexBuilderConfig(run_dir=str(run_dir), once=True)) == 1
    export_tiny(run_dir, 20, run[1], run[2])
    _full_disk(monkeypatch)
    code, lines, err = _index(run, "--once=true", "--build_retries=0", capsys=capsys)
    assert code == USER_ERROR_EXIT_CODE and len(lines) == 1 and "Traceback" not in err, err
    assert str(layout.index_dir(run_dir)) in lines[0] and "space" in lines[0] and "resume" in lines[0]
    # nothing half-written: v10 stays live, no v20, no staging folder, and export 20 is there to build again
    assert live_index.current_index_step(str(run_dir)) == 10 and _published(run_dir) == ["v-00000010"]
    assert _leftovers(run_dir) == [] and layout.latest_retriever_export(run_dir)[0] == 20
    monkeypatch.undo()
    assert run_builder(IndexBuilderConfig(run_dir=str(run_dir), once=True)) == 1
    assert live_index.current_index_step(str(run_dir)) == 20 and not _failure_record(run_dir).exists()


@pytest.mark.parametrize("where", ["faiss write", "read-only publish"])
def test_a_failed_index_write_is_one_line_naming_the_path_and_the_live_index_stays(run, monkeypatch, capsys, where):
    run_dir = run[0]
    export_tiny(run_dir, 10, run[1], run[2])
    assert run_builder(IndexBuilderConfig(run_dir=str(run_dir), once=True)) == 1
    export_tiny(run_dir, 20, run[1], run[2])
    if where == "faiss write":

        def full(index, path):  # what faiss raises: the OS error is only in the text
            raise RuntimeError(f"Error in faiss::write_index: write error in {path}: 0 != 64 (No space left on device)")

        monkeypatch.setattr(faiss, "write_index", full)
    else:

        def read_only(src, dst):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(src), None, str(dst))

        monkeypatch.setattr(os, "rename", read_only)
    code, lines, err = _index(run, "--once=true", "--build_retries=0", capsys=capsys)
    assert code == USER_ERROR_EXIT_CODE and len(lines) == 1 and "Traceback" not in err, err
    assert str(layout.index_dir(run_dir)) in lines[0] and "resume" in lines[0]
    assert ("no space left" if where == "faiss write" else "read-only file system") in lines[0]
    monkeypatch.undo()
    assert live_index.current_index_step(str(run_dir)) == 10 and _published(run_dir) == ["v-00000010"]
    assert _leftovers(run_dir) == []


def test_a_build_that_fails_for_want_of_space_for_a_moment_is_retried_and_published(run, monkeypatch, caplog):
    run_dir = run[0]
    export_tiny(run_dir, 0, run[1], run[2])
    calls = _fail_index_writes(monkeypatch, times=1)
    cfg = IndexBuilderConfig(run_dir=str(run_dir), once=True, build_retries=2, retry_backoff_s=0.05)
    assert run_builder(cfg) == 1
    assert len(calls) == 2 and live_index.current_index_step(str(run_dir)) == 0
    assert "attempt 1 of 3" in caplog.text and not _failure_record(run_dir).exists() and _leftovers(run_dir) == []


def test_a_build_that_keeps_failing_is_given_up_after_its_retries_and_the_reason_is_recorded(run, monkeypatch, capsys):
    run_dir = run[0]
    export_tiny(run_dir, 0, run[1], run[2])
    calls = _fail_index_writes(monkeypatch, times=100)
    layout.mark_done(run_dir)  # note: without the fix, a polling builder skips the failed export and then exits 0
    code, lines, err = _index(run, *FAST_RETRIES, capsys=capsys)
    assert code == USER_ERROR_EXIT_CODE and len(lines) == 1 and "Traceback" not in err, err
    assert len(calls) == 3 and "3 attempts" in lines[0] and "no space left" in lines[0]
    assert _failure_record(run_dir).exists() and _published(run_dir) == [] and _leftovers(run_dir) == []


def _bad_token_blocks(run: tuple[Path, Path, Path]) -> Path:
    """A copy of the run's blocks with a wordpiece id past the vocabulary in block 3 (load_build_inputs refuses it)."""
    rows = datasets.load_from_disk(str(run[1])).to_dict()
    rows["body_ids"][3] = [7, 10_000, 8]
    bad = run[1].parent / "bad_blocks"
    datasets.Dataset.from_dict(rows, features=BLOCK_FEATURES).save_to_disk(bad)
    return bad


def test_a_build_that_retrying_cannot_fix_is_not_retried_and_a_restarted_builder_clears_the_record(run, capsys):
    run_dir = run[0]
    bad = _bad_token_blocks(run)
    export_tiny(run_dir, 0, bad, run[2])
    layout.mark_done(run_dir)
    started = time.monotonic()
    code, lines, err = _index(run, "--build_retries=3", "--retry_backoff_s=30", capsys=capsys)
    assert code == USER_ERROR_EXIT_CODE and len(lines) == 1, err
    assert time.monotonic() - started < 20 and "1 attempt" in lines[0] and "step 0" in lines[0]
    assert _failure_record(run_dir).exists() and _published(run_dir) == []
    # the blocks are cut again (fixed in place): a restarted builder removes the stale record and builds
    shutil.rmtree(bad)
    shutil.copytree(run[1], bad)
    assert run_builder(IndexBuilderConfig(run_dir=str(run_dir), once=True)) == 1
    assert not _failure_record(run_dir).exists() and _published(run_dir) == ["v-00000000"]


def _trainer_sync(run_dir: Path) -> tuple[IndexSync, IndexWatcher]:
    """The trainer's side (one process, no child builder: the builder runs standalone)."""
    watcher = IndexWatcher(run_dir, 0.05).start()
    accelerator = SimpleNamespace(num_processes=1, is_main_process=True)
    return IndexSync(run_dir, accelerator, watcher, RunTotals(), builder_failure=lambda: None), watcher


def _standalone_builder(cfg: IndexBuilderConfig) -> tuple[threading.Thread, threading.Event]:
    stop = threading.Event()
    thread = threading.Thread(target=lambda: _swallow(run_builder, cfg, stop=stop), daemon=True)
    thread.start()
    return thread, stop


def _swallow(fn, *args, **kwargs) -> None:
    try:
        fn(*args, **kwargs)
    except UserError:
        pass  # note: what `realm index` prints as its one line; the trainer reads the recorded reason


def test_a_trainer_waiting_for_a_version_gets_it_after_a_transient_failure(run, monkeypatch):
    run_dir = run[0]
    export_tiny(run_dir, 0, run[1], run[2])
    calls = _fail_index_writes(monkeypatch, times=1)
    sync, watcher = _trainer_sync(run_dir)
    builder, stop = _standalone_builder(
        IndexBuilderConfig(run_dir=str(run_dir), poll_interval_s=0.02, build_retries=2, retry_backoff_s=0.05)
    )
    try:
        sync.wait_for_index(0, step=0, timeout_s=60)
    finally:
        stop.set()
        builder.join(timeout=30)
        watcher.close()
    assert sync.index.step == 0 and len(calls) == 2


def test_a_trainer_waiting_for_a_version_a_standalone_builder_gave_up_on_stops_at_once_with_its_reason(run):
    run_dir = run[0]
    export_tiny(run_dir, 0, _bad_token_blocks(run), run[2])
    sync, watcher = _trainer_sync(run_dir)
    builder, stop = _standalone_builder(IndexBuilderConfig(run_dir=str(run_dir), poll_interval_s=0.02))
    started = time.monotonic()
    try:
        with pytest.raises(UserError) as caught:
            sync.wait_for_index(0, step=0, timeout_s=60)
    finally:
        stop.set()
        builder.join(timeout=30)
        watcher.close()
    message = str(caught.value)
    assert time.monotonic() - started < 20 and "\n" not in message
    assert "gave up" in message and "retriever step 0" in message and "block 3 holds wordpiece id 10000" in message
