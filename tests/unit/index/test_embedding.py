"""Corpus re-embedding: batches read in slices and loaded in a background thread, embedded in length order, land in
the rows of their blocks exactly as each block embedded alone; a cancelled build stops the loader thread too."""

from __future__ import annotations

import threading

import datasets
import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from realm.data.packing import SpecialIds, block_batch
from realm.index import embedding
from realm.index.embedding import BuildCancelled, embed_blocks
from tests.helpers import MAX_BLOCK_LENGTH, export_tiny, make_run

NUM_BLOCKS = 37


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    run_dir, blocks_path, tokenizer = make_run(tmp_path_factory.mktemp("embedding"), NUM_BLOCKS)
    embedder = export_tiny(run_dir, 1, blocks_path, tokenizer).doc_embedder.eval()
    special = SpecialIds.of(AutoTokenizer.from_pretrained(tokenizer))
    return embedder, datasets.load_from_disk(str(blocks_path)), special


def _alone(embedder, blocks, special, i: int) -> np.ndarray:
    """Block i embedded on its own: no padding, no batch, no loader."""
    inputs = block_batch([blocks[i]["title_ids"]], [blocks[i]["body_ids"]], special, MAX_BLOCK_LENGTH)
    with torch.inference_mode():
        return embedder(**inputs)[0].numpy()


def test_every_block_lands_in_its_own_row_across_slices_and_batches(world, monkeypatch):
    embedder, blocks, special = world
    monkeypatch.setattr(embedding, "_READ_BATCHES", 2)  # several slices of 2 batches, the last one short
    lengths = embedding.block_lengths(blocks, MAX_BLOCK_LENGTH)
    assert len(set(lengths.tolist())) > 3  # length order differs from row order: rows must be put back
    rows = np.array([30, 2, 17, 5, 11, 36, 0, 23, 8, 14, 29])
    out = np.full((len(rows), embedder.projection.out_features), np.nan, dtype=np.float32)
    embed_blocks(embedder, blocks, special, MAX_BLOCK_LENGTH, 3, out, rows=rows)
    for i, row in enumerate(rows):
        np.testing.assert_allclose(out[i], _alone(embedder, blocks, special, row), rtol=1e-4, atol=1e-5)
    full = np.full((NUM_BLOCKS, embedder.projection.out_features), np.nan, dtype=np.float32)
    embed_blocks(embedder, blocks, special, MAX_BLOCK_LENGTH, 4, full)
    np.testing.assert_allclose(full[rows], out, rtol=1e-4, atol=1e-5)


def test_a_cancelled_build_stops_the_loader(world):
    embedder, blocks, special = world
    out = np.zeros((NUM_BLOCKS, embedder.projection.out_features), dtype=np.float32)
    polls = []
    with pytest.raises(BuildCancelled, match="stopped after 4 of 37"):
        embed_blocks(
            embedder, blocks, special, MAX_BLOCK_LENGTH, 2, out, should_stop=lambda: polls.append(1) or len(polls) > 2
        )
    assert not [t for t in threading.enumerate() if t.name == "block-loader"]


def test_chunked_embedding_reads_the_corpus_lengths_once_and_equals_one_pass(world, monkeypatch):
    from realm.pretrain import eval_search

    embedder, blocks, special = world
    calls = []
    counted = embedding.block_lengths
    monkeypatch.setattr(eval_search, "block_lengths", lambda *a: calls.append(1) or counted(*a), raising=False)
    monkeypatch.setattr(embedding, "block_lengths", lambda *a: calls.append(1) or counted(*a))
    chunks = list(eval_search.embedded_chunks(embedder, blocks, special, MAX_BLOCK_LENGTH, 10, batch_size=4))
    assert [len(c) for c in chunks] == [10, 10, 10, 7]
    assert len(calls) == 1  # note: not once a chunk, which at 21M blocks is hundreds of passes over all N lengths
    whole = np.zeros((NUM_BLOCKS, embedder.projection.out_features), dtype=np.float32)
    embed_blocks(embedder, blocks, special, MAX_BLOCK_LENGTH, 4, whole)
    np.testing.assert_allclose(torch.cat(chunks).numpy(), whole, rtol=1e-4, atol=1e-5)
