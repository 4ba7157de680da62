"""Exact inner-product search over a corpus that is never held whole: blocks arrive in chunks of embeddings and each
query keeps only its running top-k.

``BruteForceIndex`` needs the [N, D] matrix in memory (21M x 128 fp32 = 10.7 GB for DPR's Wikipedia, and a
[Q, N] score matrix on top); here the peak is

    chunk_size x D x 4 bytes (one chunk's embeddings)
    + query_block x chunk_size x 4 bytes (one block of scores)
    + Q x k x 12 bytes (the running top-k: float32 score, int64 id)

whatever N is. The price: every query must be known before the corpus is read (one pass over the blocks serves
all of them), so it answers a fixed query set, not a stream of batches (``PrecomputedSearch`` replays the answers).
Results equal ``BruteForceIndex``'s up to the order of exactly tied scores.
"""

from __future__ import annotations

from typing import Callable, Iterable

import torch
from torch import Tensor

QUERY_BLOCK = 1024
"""Queries scored against a chunk at once: bounds the [queries, chunk] score matrix."""


class RunningTopK:
    """The best ``k`` (score, id) pairs seen so far for each of ``num_queries`` queries, best first."""

    def __init__(self, num_queries: int, k: int) -> None:
        if k <= 0:
            raise ValueError(f"k must be positive, got {k}")
        self.k = k
        self.scores = torch.full((num_queries, 0), float("-inf"))
        self.ids = torch.zeros((num_queries, 0), dtype=torch.int64)

    def add(self, queries: Tensor, chunk: Tensor, first_id: int) -> None:
        """Scores [Q, D] ``queries`` against [C, D] ``chunk`` (rows ``first_id .. first_id + C - 1``) and merges."""
        if chunk.shape[0] == 0:
            return
        chunk = chunk.to(queries.dtype)
        parts_s, parts_i = [], []
        for start in range(0, queries.shape[0], QUERY_BLOCK):
            scores = queries[start : start + QUERY_BLOCK] @ chunk.T  # [q, C]
            # note: merge this chunk's own top-k with the running one, never the whole [q, C] with it
            top, rows = scores.topk(min(self.k, chunk.shape[0]), dim=1)
            merged = torch.cat([self.scores[start : start + QUERY_BLOCK], top.float()], dim=1)
            ids = torch.cat([self.ids[start : start + QUERY_BLOCK], rows.to(torch.int64) + first_id], dim=1)
            best, order = merged.topk(min(self.k, merged.shape[1]), dim=1)
            parts_s.append(best)
            parts_i.append(ids.gather(1, order))
        self.scores, self.ids = torch.cat(parts_s), torch.cat(parts_i)


def streamed_search(queries: Tensor, chunks: Iterable[Tensor], k: int) -> tuple[Tensor, Tensor]:
    """Exact top-``k`` of [Q, D] ``queries`` over the rows of ``chunks`` ([C_i, D] each, consecutive ids from 0).

    Returns:
        ([Q, min(k, N)] float32 scores, [Q, min(k, N)] int64 ids), best first, as ``BruteForceIndex.search``.
    """
    queries = queries.detach().float().cpu()
    top = RunningTopK(queries.shape[0], k)
    first_id = 0
    for chunk in chunks:
        top.add(queries, chunk.detach().float().cpu(), first_id)
        first_id += chunk.shape[0]
    return top.scores, top.ids


class StreamedIndex:
    """A ``DocumentIndex`` that reads its corpus anew, chunk by chunk, at every ``search`` (``streamed_search``):
    exact, with the peak above whatever N is. ``chunks()`` starts one pass (e.g. blocks embedded now,
    ``realm.pretrain.eval_search.embedded_chunks``); since each call is a pass, search every query in one call."""

    def __init__(self, chunks: Callable[[], Iterable[Tensor]], num_vectors: int) -> None:
        self.chunks, self._num_vectors = chunks, num_vectors

    @property
    def num_vectors(self) -> int:
        return self._num_vectors

    def search(self, queries: Tensor, k: int) -> tuple[Tensor, Tensor]:
        scores, ids = streamed_search(queries, self.chunks(), k)
        return scores.to(queries.device), ids.to(queries.device)


class PrecomputedSearch:
    """A ``DocumentIndex`` that replays search results computed beforehand for a known sequence of query batches
    (``streamed_search`` over all of them at once): the i-th ``search`` call answers rows ``offset .. offset + B``.
    The queries must come in the order they were computed in; a batch of another size or a deeper ``k`` is an
    error, not a silent mismatch."""

    def __init__(self, scores: Tensor, ids: Tensor, num_vectors: int) -> None:
        self.scores, self.ids, self._num_vectors = scores, ids, num_vectors
        self.offset = 0

    @property
    def num_vectors(self) -> int:
        return self._num_vectors

    def search(self, queries: Tensor, k: int) -> tuple[Tensor, Tensor]:
        end = self.offset + queries.shape[0]
        if end > self.scores.shape[0] or min(k, self._num_vectors) > self.scores.shape[1]:
            raise RuntimeError(
                f"PrecomputedSearch holds {self.scores.shape[0]} queries x top-{self.scores.shape[1]}; asked for rows "
                f"{self.offset}..{end} x top-{k}"
            )
        k = min(k, self.scores.shape[1])
        scores, ids = self.scores[self.offset : end, :k], self.ids[self.offset : end, :k]
        self.offset = end
        return scores.to(queries.device), ids.to(queries.device)
