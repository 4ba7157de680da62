"""The streamed exact search returns BruteForceIndex's top-k whatever the chunk size, and replays it in order."""

from __future__ import annotations

import pytest
import torch

from realm.index.mips import BruteForceIndex
from realm.index.streamed import PrecomputedSearch, RunningTopK, streamed_search


@pytest.mark.parametrize("chunk", [1, 7, 64, 199, 200, 1000])
def test_streamed_search_equals_brute_force_for_any_chunk_size(chunk):
    gen = torch.Generator().manual_seed(0)
    blocks, queries = torch.randn(200, 16, generator=gen), torch.randn(33, 16, generator=gen)
    want_scores, want_ids = BruteForceIndex(blocks).search(queries, 10)
    scores, ids = streamed_search(queries, blocks.split(chunk), 10)
    assert torch.equal(ids, want_ids)
    torch.testing.assert_close(scores, want_scores)


def test_streamed_search_scores_queries_in_blocks(monkeypatch):
    """More queries than one scoring block: each block of queries keeps its own rows' results."""
    monkeypatch.setattr("realm.index.streamed.QUERY_BLOCK", 5)
    gen = torch.Generator().manual_seed(1)
    blocks, queries = torch.randn(50, 8, generator=gen), torch.randn(12, 8, generator=gen)
    _, want = BruteForceIndex(blocks).search(queries, 4)
    assert torch.equal(streamed_search(queries, blocks.split(9), 4)[1], want)


def test_k_beyond_the_corpus_gives_every_block_once():
    blocks = torch.randn(5, 4)
    scores, ids = streamed_search(torch.randn(3, 4), blocks.split(2), 8)
    assert ids.shape == (3, 5) and all(sorted(row.tolist()) == list(range(5)) for row in ids)
    assert (scores[:, :-1] >= scores[:, 1:]).all()


def test_running_top_k_holds_only_k_per_query():
    top = RunningTopK(num_queries=4, k=3)
    for first in range(0, 100, 10):
        top.add(torch.randn(4, 2), torch.randn(10, 2), first)
    assert top.scores.shape == top.ids.shape == (4, 3)


def test_precomputed_search_replays_batches_in_order_and_refuses_more():
    scores, ids = torch.arange(12.0).reshape(6, 2), torch.arange(12).reshape(6, 2)
    index = PrecomputedSearch(scores, ids, num_vectors=100)
    assert torch.equal(index.search(torch.zeros(4, 3), 2)[1], ids[:4])
    assert torch.equal(index.search(torch.zeros(2, 3), 1)[1], ids[4:, :1])
    with pytest.raises(RuntimeError, match="asked for rows 6..7"):
        index.search(torch.zeros(1, 3), 2)
