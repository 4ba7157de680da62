"""End to end: a tiny retriever is exported, the builder embeds the corpus, indexes and publishes it, and always
builds the newest export."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from realm.core.errors import RunError
from realm.data.packing import SpecialIds, block_batch
from realm.index import versions
from realm.index.mips import BruteForceIndex
from realm.index_builder.watch import IndexBuilderConfig, main, run_builder
from realm.models.retriever import Retriever
from realm.run import layout, live_index, publication
from realm.trainer.index_watcher import IndexWatcher
from tests.helpers import MAX_BLOCK_LENGTH, ROOT, builder_pids, export_tiny, make_run, subprocess_env

REPO = ROOT
NUM_BLOCKS = 60

pytestmark = pytest.mark.slow


@pytest.fixture()
def run(tmp_path) -> tuple[Path, Path, Path]:
    """(run_dir, blocks_path, tokenizer_path): a 40-word vocab and random tiny blocks."""
    return make_run(tmp_path, NUM_BLOCKS, max_body=40)


def export(run: tuple[Path, Path, Path], step: int) -> Retriever:
    return export_tiny(run[0], step, run[1], run[2])


def test_builder_publishes_exact_embeddings_and_builds_only_the_newest_export(run):
    run_dir, blocks_path, tokenizer_path = run
    retriever = export(run, 10)
    assert run_builder(IndexBuilderConfig(run_dir=str(run_dir), once=True, batch_size=7, precision="fp32")) == 1
    published = versions.load_index_version(live_index.current_index_version(run_dir))
    export_manifest = publication.read_manifest(layout.retriever_dir(run_dir) / "step-00000010")
    blocks = datasets.load_from_disk(str(blocks_path))
    manifest = published.manifest
    assert published.path.name == "v-00000010" and published.step == 10
    assert manifest["weights_sha256"] == export_manifest["weights_sha256"]
    assert manifest["corpus_fingerprint"] == versions.corpus_fingerprint(blocks["uid"])
    assert (manifest["num_vectors"], manifest["dim"], manifest["factory"]) == (NUM_BLOCKS, 16, "Flat")
    assert set(manifest["files"]) == set(versions.INDEX_FILES) and manifest["build_seconds"] > 0
    np.testing.assert_array_equal(published.block_ids, np.arange(NUM_BLOCKS))

    # every row equals a direct, unbatched forward of its block (batching by length changes nothing)
    special = SpecialIds.of(AutoTokenizer.from_pretrained(tokenizer_path))
    embedder = retriever.doc_embedder.eval()
    with torch.inference_mode():
        direct = torch.cat(
            [embedder(**block_batch([b["title_ids"]], [b["body_ids"]], special, MAX_BLOCK_LENGTH)) for b in blocks]
        )
    torch.testing.assert_close(torch.from_numpy(np.array(published.embeddings())), direct, atol=1e-5, rtol=0)

    # FAISS (Flat) search equals brute force over the published embeddings
    queries = torch.randn(9, 16, generator=torch.Generator().manual_seed(0))
    scores, ids = published.search(queries, 5)
    ref_scores, ref_ids = BruteForceIndex(direct).search(queries, 5)
    assert torch.equal(ids, ref_ids)
    torch.testing.assert_close(scores, ref_scores, atol=1e-4, rtol=1e-5)

    # two newer exports: only the newest is built, through the command line with an override
    export(run, 20)
    export(run, 30)
    argv = [
        "--config",
        str(REPO / "configs/index/default.yaml"),
        "--run_dir",
        str(run_dir),
        "--once=true",
        "--index.factory=HNSW32",
    ]
    assert main(argv) == 0
    assert [s for s, _ in publication.list_published(layout.index_dir(run_dir), layout.INDEX_PREFIX)] == [10, 30]
    latest = versions.load_index_version(live_index.current_index_version(run_dir))
    assert latest.step == 30 and latest.manifest["factory"] == "HNSW32"
    # exports older than the live index can never be built again, so the builder removes them
    assert [s for s, _ in publication.list_published(layout.retriever_dir(run_dir), layout.RETRIEVER_PREFIX)] == [30]


def test_bf16_builder_embeds_in_bf16_and_publishes_float32_vectors_close_to_fp32(run):
    run_dir, blocks_path, tokenizer_path = run
    retriever = export(run, 10)
    assert run_builder(IndexBuilderConfig(run_dir=str(run_dir), once=True, batch_size=7, precision="bf16")) == 1
    published = versions.load_index_version(live_index.current_index_version(run_dir))
    assert published.manifest["embed_precision"] == "bf16"
    vectors = np.array(published.embeddings())
    assert vectors.dtype == np.float32
    blocks = datasets.load_from_disk(str(blocks_path))
    special = SpecialIds.of(AutoTokenizer.from_pretrained(tokenizer_path))
    inputs = block_batch(blocks["title_ids"], blocks["body_ids"], special, MAX_BLOCK_LENGTH)
    with torch.inference_mode():
        fp32 = retriever.doc_embedder.eval()(**inputs)
        bf16 = retriever.doc_embedder.to(torch.bfloat16)(**inputs).float()
    got = torch.from_numpy(vectors)
    # the published rows are the bf16 model's (length-batched, so equal up to bf16 rounding), not the fp32 model's
    assert (got - fp32).abs().max() > 1e-4
    assert torch.nn.functional.cosine_similarity(got, bf16).min() > 0.999
    assert torch.nn.functional.cosine_similarity(got, fp32).min() > 0.99


def test_builder_precision_is_checked_up_front():
    with pytest.raises(ValueError, match="precision must be one of"):
        IndexBuilderConfig(run_dir="r", precision="fp8")
    with pytest.raises(ValueError, match="fp16 needs a GPU"):
        IndexBuilderConfig(run_dir="r", precision="fp16")


def test_polling_builder_follows_exports_and_exits_when_the_run_is_done(run):
    run_dir = run[0]
    export(run, 0)
    cfg = IndexBuilderConfig(run_dir=str(run_dir), poll_interval_s=0.02, batch_size=16, keep_versions=1)
    builder = threading.Thread(target=run_builder, args=(cfg,))
    builder.start()
    # while it holds the run, the builder's heartbeat tells a waiting trainer that one is at work
    heartbeat = layout.index_dir(run_dir) / layout.BUILDER_HEARTBEAT
    deadline = time.monotonic() + 30
    while not heartbeat.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert IndexWatcher(run_dir).builder_alive()
    export(run, 5)
    layout.mark_done(run_dir)  # the trainer's last export is written before DONE
    builder.join(timeout=60)
    assert not builder.is_alive()
    assert not heartbeat.exists()  # it let go of the run
    assert versions.load_index_version(live_index.current_index_version(run_dir)).step == 5
    assert [s for s, _ in publication.list_published(layout.index_dir(run_dir), layout.INDEX_PREFIX)] == [5]  # keep_versions=1
    # with everything indexed and DONE written, a fresh builder exits at once
    assert run_builder(cfg) == 0


def test_a_held_builder_takes_the_run_only_once_its_hold_file_is_gone(run):
    """The trainer starts its child builder before its own set-up, held by ``RUN/index/BUILDER_HOLD``: until the
    trainer removes it (having cleared what a killed run left), the builder neither takes the run nor builds, even
    with an export waiting; then it builds at once. Stopped while held, it never takes the run."""
    run_dir = run[0]
    export(run, 3)  # note: an export a killed run left, which the trainer would discard before it lets the builder go
    hold = layout.index_dir(run_dir) / layout.BUILDER_HOLD
    hold.parent.mkdir(parents=True, exist_ok=True)
    hold.touch()
    cfg = IndexBuilderConfig(run_dir=str(run_dir), once=True, poll_interval_s=0.02, hold_file=str(hold))
    built: list[int] = []
    builder = threading.Thread(target=lambda: built.append(run_builder(cfg)))
    builder.start()
    time.sleep(1.5)
    heartbeat = layout.index_dir(run_dir) / layout.BUILDER_HEARTBEAT
    assert builder.is_alive() and not heartbeat.exists() and live_index.current_index_version(run_dir) is None
    hold.unlink()
    builder.join(timeout=60)
    assert built == [1] and versions.load_index_version(live_index.current_index_version(run_dir)).step == 3

    hold.touch()
    stop = threading.Event()
    stopped: list[int] = []
    held = threading.Thread(target=lambda: stopped.append(run_builder(cfg, stop=stop)))
    held.start()
    stop.set()  # as the trainer's SIGTERM, or its death seen by the parent watch
    held.join(timeout=30)
    assert stopped == [0] and hold.exists() and not heartbeat.exists()


def test_second_builder_on_the_same_run_is_refused_after_the_lock_timeout(run):
    run_dir = run[0]
    with publication.exclusive_lock(layout.index_dir(run_dir) / ".builder.lock"):
        t0 = time.monotonic()
        with pytest.raises(RuntimeError, match="another index builder"):
            run_builder(IndexBuilderConfig(run_dir=str(run_dir), once=True, lock_timeout_s=0.5))
        assert time.monotonic() - t0 >= 0.5  # it waited for a holder that might be stopping
        assert not (layout.index_dir(run_dir) / layout.BUILDER_HEARTBEAT).exists()  # the refused one never beat


def test_a_builder_waits_for_a_lock_its_dying_holder_releases(run):
    run_dir = run[0]
    export(run, 2)
    lock = publication.exclusive_lock(layout.index_dir(run_dir) / ".builder.lock")
    lock.__enter__()
    threading.Timer(0.5, lambda: lock.__exit__(None, None, None)).start()  # an orphan that stops half a second later
    assert run_builder(IndexBuilderConfig(run_dir=str(run_dir), once=True, lock_timeout_s=20)) == 1


def test_a_builder_stops_when_the_trainer_that_started_it_dies(run):
    run_dir = run[0]
    export(run, 1)
    # a stand-in trainer: starts a builder with its own pid, as ChildBuilder does, then waits to be killed
    parent = subprocess.Popen(
        [sys.executable, "-c", (
            "import os, subprocess, sys, time; "
            f"subprocess.Popen([sys.executable, '-m', 'realm.index_builder.watch', '--run_dir={run_dir}', "
            "'--poll_interval_s=0.1', f'--parent_pid={os.getpid()}']); time.sleep(600)"
        )],
        cwd=REPO, env=subprocess_env(),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while live_index.current_index_version(run_dir) is None and time.monotonic() < deadline:
            time.sleep(0.1)  # the builder is up and has built step 1; it now polls for newer exports
        assert live_index.current_index_version(run_dir) is not None
        assert len(builder_pids(run_dir)) == 1
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 20
        while builder_pids(run_dir) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not builder_pids(run_dir), "the builder outlived the trainer that started it"
    finally:
        parent.kill()
        for pid in builder_pids(run_dir):
            os.kill(pid, signal.SIGKILL)



def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_corrupt_export_is_refused_and_nothing_is_published(run):
    run_dir = run[0]
    export(run, 4)
    _flip_a_byte(layout.retriever_dir(run_dir) / "step-00000004" / "doc" / "model.safetensors")
    with pytest.raises(RunError, match="do not match the export's weights_sha256"):
        run_builder(IndexBuilderConfig(run_dir=str(run_dir), once=True))
    assert live_index.current_index_version(run_dir) is None
    assert not list(layout.index_dir(run_dir).glob("v-*"))


def test_a_broken_live_index_is_rebuilt(run):
    run_dir = run[0]
    export(run, 6)
    assert run_builder(IndexBuilderConfig(run_dir=str(run_dir), once=True)) == 1
    live = live_index.current_index_version(run_dir)
    _flip_a_byte(live / versions.EMBEDDINGS_FILE)
    with pytest.raises(live_index.IndexVersionError):
        versions.load_index_version(live)  # what the trainer sees: it refuses the version
    assert run_builder(IndexBuilderConfig(run_dir=str(run_dir), once=True)) == 1
    rebuilt = versions.load_index_version(live_index.current_index_version(run_dir))  # verifies every checksum
    assert rebuilt.step == 6


def test_a_removal_of_an_old_export_cut_short_by_a_kill_is_cleaned_by_the_next_builder(run, monkeypatch):
    """The builder removes exports older than the index it publishes; killed between the rename and the delete it
    leaves a folder behind, and the next ``realm index --once=true`` removes it (not only the trainer's start)."""
    run_dir = run[0]
    export(run, 2)
    assert run_builder(IndexBuilderConfig(run_dir=str(run_dir), once=True)) == 1
    export(run, 4)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt("killed mid-removal")

    monkeypatch.setattr(publication.shutil, "rmtree", killed)
    with pytest.raises(KeyboardInterrupt):
        run_builder(IndexBuilderConfig(run_dir=str(run_dir), once=True))
    monkeypatch.undo()
    left = [p.name for p in layout.retriever_dir(run_dir).iterdir() if p.name.startswith(".")]
    assert left, "the simulated kill left nothing behind"
    run_builder(IndexBuilderConfig(run_dir=str(run_dir), once=True))
    assert sorted(p.name for p in layout.retriever_dir(run_dir).iterdir()) == ["step-00000004"]
