"""Per-rank embedding shards of the N-process builder, run rank by rank in one process: they tile the corpus, stream
together into exactly what one process embeds, are reused only when finished for the same retriever version, and a
missing, unfinished or corrupt shard is never taken as done."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import datasets
import numpy as np
import pytest
from transformers import AutoTokenizer

from realm.data.packing import SpecialIds
from realm.index import shards as sh
from realm.index.builder_group import BuilderGroup, PeerError
from realm.index.embedding import embed_blocks
from realm.index.mips import IndexConfig
from realm.index_builder.sharded import _assemble_and_build, shard_keys
from realm.index_builder.watch import IndexBuilderConfig
from realm.run import layout, live_index, publication
from tests.helpers import MAX_BLOCK_LENGTH, export_tiny, make_run

NUM_BLOCKS = 50


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A tiny run with one export: (run_dir, export manifest, embedder, blocks, special ids)."""
    run_dir, blocks_path, tokenizer = make_run(tmp_path_factory.mktemp("shards"), NUM_BLOCKS)
    embedder = export_tiny(run_dir, 3, blocks_path, tokenizer).doc_embedder.eval()
    export = publication.read_manifest(layout.retriever_dir(run_dir) / "step-00000003")
    special = SpecialIds.of(AutoTokenizer.from_pretrained(tokenizer))
    return run_dir, export, embedder, datasets.load_from_disk(str(blocks_path)), special


def _embed_all(world) -> np.ndarray:
    _, _, embedder, blocks, special = world
    out = np.zeros((NUM_BLOCKS, 16), dtype=np.float32)
    embed_blocks(embedder, blocks, special, MAX_BLOCK_LENGTH, 64, out)
    return out


def _embed_ranks(world, folder: Path, world_size: int, ranks=None) -> list[sh.ShardKey]:
    _, export, embedder, blocks, special = world
    keys = shard_keys(blocks, export, 16, world_size)
    for key in keys if ranks is None else [keys[r] for r in ranks]:
        sh.embed_shard(embedder, blocks, special, key, folder, batch_size=4)
    return keys


def test_shards_are_contiguous_balanced_by_wordpieces_and_tile_the_rows():
    lengths = np.array([10] * 30 + [40] * 10)  # 700 wordpieces; the long blocks at the end
    bounds = sh.shard_bounds(lengths, 2)
    assert bounds[0][0] == 0 and bounds[-1][1] == 40 and bounds[0][1] == bounds[1][0]
    work = [lengths[a:b].sum() for a, b in bounds]
    assert abs(work[0] - work[1]) <= 40, work  # balanced by work, not by count (a 20/20 split would be 200/500)
    assert sh.shard_bounds(lengths, 1) == [(0, 40)]
    assert sh.shard_bounds(np.array([5, 5]), 3) in ([(0, 1), (1, 2), (2, 2)], [(0, 1), (1, 1), (1, 2)])
    assert sh.shard_bounds(np.array([], dtype=np.int64), 2) == [(0, 0), (0, 0)]


@pytest.mark.parametrize("world_size", [2, 3])
def test_shards_streamed_together_equal_one_process_embedding(world, tmp_path, world_size):
    keys = _embed_ranks(world, tmp_path, world_size)
    markers = sh.assemble(tmp_path, keys, tmp_path / "embeddings.npy")
    assert [m.num_rows for m in markers] == [k.row_end - k.row_start for k in keys]
    np.testing.assert_allclose(np.load(tmp_path / "embeddings.npy"), _embed_all(world), atol=1e-5, rtol=0)


def test_finished_shard_of_the_same_version_is_reused_and_an_unfinished_one_redone(world, tmp_path, monkeypatch):
    keys = _embed_ranks(world, tmp_path, 2)
    data1 = tmp_path / f"{sh.shard_name(1, 2)}.npy"
    (tmp_path / f"{sh.shard_name(1, 2)}.json").unlink()  # rank 1 "killed" before writing its marker
    data1.write_bytes(b"half")
    calls = []
    monkeypatch.setattr(sh, "embed_blocks", lambda *a, **k: (calls.append(k["rows"][0]), embed_blocks(*a, **k)))
    _, _, embedder, blocks, special = world
    assert sh.embed_shard(embedder, blocks, special, keys[0], tmp_path, 4)[1] is True  # reused
    assert sh.embed_shard(embedder, blocks, special, keys[1], tmp_path, 4)[1] is False  # redone
    assert calls == [keys[1].row_start]
    sh.assemble(tmp_path, keys, tmp_path / "embeddings.npy")
    np.testing.assert_allclose(np.load(tmp_path / "embeddings.npy"), _embed_all(world), atol=1e-5, rtol=0)


def test_a_shard_of_another_version_or_corpus_is_never_reused(world, tmp_path):
    run_dir, export, _, _, _ = world
    assert sh.shard_folder(run_dir, "a" * 64) != sh.shard_folder(run_dir, "b" * 64)  # keyed by the weights hash
    (key,) = _embed_ranks(world, tmp_path, 1)
    shorter = {**key.source, "max_block_length": key.source["max_block_length"] - 1}
    with pytest.raises(sh.ShardError, match="marker is for"):
        sh.check_shard(tmp_path, replace(key, source=shorter))
    with pytest.raises(sh.ShardError, match="marker is for"):
        sh.check_shard(tmp_path, replace(key, source={**key.source, "weights_sha256": "other"}))


def test_a_missing_or_corrupt_shard_fails_assembly_loudly(world, tmp_path):
    keys = _embed_ranks(world, tmp_path, 2, ranks=[0])  # rank 1 never finished (or died)
    with pytest.raises(sh.ShardError, match="shard-00001-of-00002: no marker, the shard is unfinished"):
        sh.assemble(tmp_path, keys, tmp_path / "embeddings.npy")
    _embed_ranks(world, tmp_path, 2, ranks=[1])
    data = tmp_path / f"{sh.shard_name(1, 2)}.npy"
    raw = bytearray(data.read_bytes())
    raw[-1] ^= 0xFF  # same size, different data
    data.write_bytes(bytes(raw))
    with pytest.raises(sh.ShardError, match="does not match the checksum"):
        sh.assemble(tmp_path, keys, tmp_path / "embeddings.npy")
    assert sh.read_marker(tmp_path, 1, 2) is None  # dropped, so the next run redoes it


def test_rank_zero_publishes_nothing_when_a_peer_failed(world):
    run_dir, export, _, _, _ = world
    reports = [{"status": "ok"}, {"status": "failed", "message": "RuntimeError: out of memory"}]
    with pytest.raises(PeerError, match="rank 1: RuntimeError: out of memory"):
        _assemble_and_build(run_dir, 3, export, reports, IndexConfig(), 3, time.time(), "fp32")
    assert live_index.current_index_version(run_dir) is None
    assert not list(layout.index_dir(run_dir).glob(f"{publication.STAGING_PREFIX}*"))


def test_single_process_group_runs_collectives_locally():
    group = BuilderGroup()
    assert group.is_main and group.world_size == 1
    assert group.broadcast(3) == 3 and group.all_gather("x") == ["x"] and group.from_main(lambda: 7) == 7
    with pytest.raises(KeyError):
        group.from_main(lambda: {}["missing"])


def test_distributed_builder_takes_a_whole_device_kind():
    assert IndexBuilderConfig(enable_distributed=True, device="cuda").device == "cuda"
    with pytest.raises(ValueError, match="CUDA_VISIBLE_DEVICES"):
        IndexBuilderConfig(enable_distributed=True, device="cuda:1")
