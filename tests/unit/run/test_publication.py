"""Crash-safe publishing: manifest last, readers ignore partial folders, corrupt files fail loudly, a killed builder
leaves the live index untouched."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from realm.core.errors import RunError
from realm.index import versions
from realm.index.mips import BruteForceIndex
from realm.index_builder.watch import IndexBuilderConfig, run_builder
from realm.run import layout, live_index, publication
from tests.helpers import MAX_BLOCK_LENGTH, ROOT, export_tiny, make_run, publish_index

REPO = ROOT


# ------------------------------------------------------------------------------------------------ fixtures


def publish_random(run_dir: Path, step: int, *, num: int = 30, dim: int = 8, make_current: bool = True) -> Path:
    """A published index version over random embeddings (no model needed)."""
    version = publish_index(run_dir, np.random.default_rng(step).standard_normal((num, dim)).astype(np.float32), step)
    if make_current:
        live_index.set_current_index(run_dir, version)
    return version


# ------------------------------------------------------------------------------------------------ generic helpers


def test_publish_folder_writes_manifest_last_and_renames(tmp_path, monkeypatch):
    staging = publication.new_staging(tmp_path)
    (staging / "data.bin").write_bytes(b"x" * 10)
    synced, renamed = [], []
    real_fsync_tree, real_rename = publication._fsync_tree, os.rename
    monkeypatch.setattr(publication, "_fsync_tree", lambda p: (synced.append((p / publication.MANIFEST).exists()), real_fsync_tree(p)))
    monkeypatch.setattr(
        publication.os, "rename", lambda a, b: (renamed.append(Path(a, publication.MANIFEST).is_file()), real_rename(a, b))
    )
    assert publication.list_published(tmp_path, "v-") == []
    final = publication.publish_folder(staging, tmp_path / "v-00000003", {"step": 3})
    assert synced == [False] and renamed == [True]  # data synced before the manifest exists; manifest before rename
    # note: the manifest also records where it was published, from which a reader finds its paths after a move
    assert not staging.exists() and publication.read_manifest(final) == {"step": 3, "published_at": str(final)}
    assert publication.list_published(tmp_path, "v-") == [(3, final)]
    with pytest.raises(FileExistsError):
        publication.publish_folder(publication.new_staging(tmp_path), final, {"step": 3})


def test_readers_ignore_folders_without_a_readable_manifest(tmp_path):
    (tmp_path / "v-00000001").mkdir()  # no manifest: a crash between mkdir and manifest
    (tmp_path / "v-00000002").mkdir()
    (tmp_path / "v-00000002" / publication.MANIFEST).write_text('{"step": 2')  # torn manifest
    publication.new_staging(tmp_path)
    good = publication.publish_folder(publication.new_staging(tmp_path), tmp_path / "v-00000000", {"step": 0})
    assert publication.list_published(tmp_path, "v-") == [(0, good)]
    assert publication.latest_published(tmp_path, "v-") == (0, good)
    assert publication.latest_published(tmp_path / "missing", "v-") is None


def test_pointer_is_replaced_atomically(tmp_path):
    assert publication.read_pointer(tmp_path / "CURRENT") is None
    publication.write_pointer(tmp_path / "CURRENT", "v-00000001")
    publication.write_pointer(tmp_path / "CURRENT", "v-00000002")
    assert publication.read_pointer(tmp_path / "CURRENT") == "v-00000002"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["CURRENT"]  # no temp file left behind


def test_prune_keeps_newest_and_never_the_current_one(tmp_path):
    for step in range(1, 6):
        publication.publish_folder(publication.new_staging(tmp_path), tmp_path / publication.folder_name("v-", step), {"step": step})
    publication.write_pointer(tmp_path / publication.CURRENT, "v-00000001")
    removed = publication.prune(tmp_path, "v-", keep=2)
    assert [p.name for p in removed] == ["v-00000002", "v-00000003"]
    assert [s for s, _ in publication.list_published(tmp_path, "v-")] == [1, 4, 5]
    assert not any(p.name.startswith(publication.STAGING_PREFIX) for p in tmp_path.iterdir())


def test_clean_staging_removes_only_staging_leftovers(tmp_path):
    leftover = publication.new_staging(tmp_path)
    (leftover / "embeddings.npy").write_bytes(b"partial")
    (tmp_path / f"{publication.STAGING_PREFIX}CURRENT-abc").write_text("v-1")  # a torn pointer write
    kept = publication.publish_folder(publication.new_staging(tmp_path), tmp_path / "v-00000001", {"step": 1})
    assert len(publication.clean_staging(tmp_path)) == 2
    assert [p.name for p in tmp_path.iterdir()] == [kept.name]


# ------------------------------------------------------------------------------------------------ index versions


def test_published_version_loads_and_searches(tmp_path):
    version = publish_random(tmp_path, 7)
    assert live_index.current_index_version(tmp_path) == version
    published = versions.load_index_version(version)
    assert published.step == 7 and published.num_vectors == 30
    assert published.manifest["files"][versions.EMBEDDINGS_FILE]["size"] == (version / versions.EMBEDDINGS_FILE).stat().st_size
    queries = torch.randn(4, 8)
    _, ids = published.search(queries, 3)
    assert torch.equal(ids, BruteForceIndex(published.embeddings()).search(queries, 3)[1])


@pytest.mark.parametrize(
    "damage, message",
    [
        ("flip", "embeddings.npy does not match its sha256"),
        ("truncate", "index.faiss has"),
        ("delete", "block_ids.npy is missing"),
        ("manifest", "no readable manifest"),
    ],
)
def test_corrupt_version_fails_verification_with_a_clear_error(tmp_path, damage, message):
    version = publish_random(tmp_path, 3)
    if damage == "flip":
        data = bytearray((version / versions.EMBEDDINGS_FILE).read_bytes())
        data[-1] ^= 0xFF
        (version / versions.EMBEDDINGS_FILE).write_bytes(bytes(data))
    elif damage == "truncate":
        with open(version / versions.FAISS_FILE, "r+b") as f:
            f.truncate(10)
    elif damage == "delete":
        (version / versions.BLOCK_IDS_FILE).unlink()
    else:
        (version / publication.MANIFEST).write_text("{")
    with pytest.raises(live_index.IndexVersionError, match=message) as err:
        versions.load_index_version(version)
    assert str(version) in str(err.value)


# ------------------------------------------------------------------------------------------------ killed builder


def _wait_for(predicate, timeout_s: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"builder exited early with {proc.returncode}: {proc.stdout.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("builder did not reach the expected state in time")
        time.sleep(0.005)


def _start_builder(run_dir: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "realm.index_builder.watch",
        "--config",
        str(REPO / "configs/index/default.yaml"),
        "--run_dir",
        str(run_dir),
        "--once=true",
        "--batch_size=1",
        "--num_threads=1",
    ]
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _embedding(index_dir: Path) -> bool:
    return any((p / versions.EMBEDDINGS_FILE).exists() for p in index_dir.glob(f"{publication.STAGING_PREFIX}*"))


class StopAfter(threading.Event):
    """A stop flag that reads as set from its ``n``-th look on: a deterministic SIGTERM in the middle of a build."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.looks, self.n = 0, n

    def is_set(self) -> bool:
        self.looks += 1
        return self.looks >= self.n


def test_stop_requested_mid_build_discards_the_staging_folder(tmp_path):
    run_dir, blocks, tokenizer = make_run(tmp_path, num_blocks=40)
    publish_random(run_dir, 1)
    export_tiny(run_dir, 2, blocks, tokenizer)
    stop = StopAfter(4)  # the loop's first look, two batches, then stop
    assert run_builder(IndexBuilderConfig(run_dir=str(run_dir), batch_size=4), stop=stop) == 0
    assert stop.looks == 4
    assert [p.name for p in layout.index_dir(run_dir).iterdir() if p.name.startswith(publication.STAGING_PREFIX)] == []
    assert versions.load_index_version(live_index.current_index_version(run_dir)).step == 1


@pytest.mark.slow
def test_builder_killed_mid_build_leaves_the_previous_version_live(tmp_path):
    run_dir, blocks, tokenizer = make_run(tmp_path, num_blocks=2000)
    publish_random(run_dir, 1)
    export_tiny(run_dir, 2, blocks, tokenizer)
    index_dir = layout.index_dir(run_dir)

    proc = _start_builder(run_dir)
    _wait_for(lambda: _embedding(index_dir), 120, proc)
    time.sleep(0.05)  # inside the 2000 single-block forward passes
    proc.kill()
    proc.communicate(timeout=30)

    (staging,) = index_dir.glob(f"{publication.STAGING_PREFIX}*")
    with pytest.raises(live_index.IndexVersionError, match="no readable manifest"):
        versions.load_index_version(staging)
    assert publication.read_pointer(index_dir / publication.CURRENT) == "v-00000001"
    assert [s for s, _ in publication.list_published(index_dir, layout.INDEX_PREFIX)] == [1]
    assert versions.load_index_version(live_index.current_index_version(run_dir)).step == 1

    # the next builder start removes the leftover and builds the pending export
    threads = torch.get_num_threads()
    try:
        assert run_builder(IndexBuilderConfig(run_dir=str(run_dir), once=True, batch_size=500, num_threads=1)) == 1
    finally:
        torch.set_num_threads(threads)
    assert not staging.exists()
    assert versions.load_index_version(live_index.current_index_version(run_dir)).step == 2


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(3))
def test_builder_killed_at_a_random_moment_never_leaves_a_corrupt_live_index(tmp_path, trial):
    rng = random.Random(100 + trial)  # seeded: kills from the start of embedding to past the publish
    run_dir, blocks, tokenizer = make_run(tmp_path, num_blocks=600)
    publish_random(run_dir, 1)
    export_tiny(run_dir, 2, blocks, tokenizer)
    index_dir = layout.index_dir(run_dir)
    proc = _start_builder(run_dir)
    _wait_for(lambda: _embedding(index_dir) or live_index.current_index_version(run_dir).name != "v-00000001", 120, proc)
    time.sleep(rng.uniform(0.0, 1.5))
    proc.kill()
    proc.communicate(timeout=30)
    live = versions.load_index_version(live_index.current_index_version(run_dir))  # verifies every checksum
    assert live.step in (1, 2)
    for _, version in publication.list_published(index_dir, layout.INDEX_PREFIX):
        versions.load_index_version(version)  # nothing published is partial
    assert run_builder(IndexBuilderConfig(run_dir=str(run_dir), once=True, batch_size=300)) in (0, 1)
    assert versions.load_index_version(live_index.current_index_version(run_dir)).step == 2
    assert not list(index_dir.glob(f"{publication.STAGING_PREFIX}*"))


def test_retriever_exports_are_pruned_to_the_newest_few(tmp_path):
    run_dir, blocks, tokenizer = make_run(tmp_path, num_blocks=4)
    for step in range(1, 6):
        export_tiny(run_dir, step, blocks, tokenizer)  # keep=0: nothing pruned
    assert len(publication.list_published(layout.retriever_dir(run_dir), layout.RETRIEVER_PREFIX)) == 5
    retriever = export_tiny(run_dir, 6, blocks, tokenizer)
    layout.export_retriever(run_dir, 7, retriever, blocks_path=str(blocks), tokenizer_path=str(tokenizer),
                            max_block_length=MAX_BLOCK_LENGTH, keep=3)  # fmt: skip
    steps = [s for s, _ in publication.list_published(layout.retriever_dir(run_dir), layout.RETRIEVER_PREFIX)]
    assert steps == [5, 6, 7]


def test_a_stage_output_lists_its_files_and_a_corrupt_one_is_refused(tmp_path):
    def save(folder: Path) -> None:
        (folder / "sub").mkdir()
        (folder / "sub" / "model.safetensors").write_bytes(b"weights")
        (folder / "config.json").write_text("{}")

    final = publication.replace_published(tmp_path / "encoder", save, {"kind": "reader_warmup_encoder"})
    assert set(publication.read_manifest(final)["files"]) == {"sub/model.safetensors", "config.json"}
    publication.verify_published(final)  # passes
    publication.verify_published(tmp_path / "not-published")  # left to its loader (a hub name, a plain folder)
    (final / "sub" / "model.safetensors").write_bytes(b"weightz")
    with pytest.raises(RunError, match="sub/model.safetensors does not match its sha256"):
        publication.verify_published(final)
