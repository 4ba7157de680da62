"""BM25 over wordpieces as an exact inner-product search: the lexical baseline a dense retriever is compared with.

Okapi BM25 with Lucene's idf, ``idf(t) = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))``, scores block ``d`` for query
``q`` as ``sum over t in q of count_q(t) idf(t) tf(t, d) (k1 + 1) / (tf(t, d) + k1 (1 - b + b |d| / avgdl))``. That is
the inner product of a query vector (``count_q(t) idf(t)``) and a block vector (the saturated term frequency), so
``BM25Index`` is a ``DocumentIndex`` over sparse block vectors, searched by the same code as the dense indexes, and
its top-k can be read by a trained reader (``realm.pretrain.heldout_eval.evaluate_heldout(query_vectors=...)``).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Iterable, Sequence

import torch
from torch import Tensor


class BM25Index:
    """BM25 over blocks given as wordpiece id lists (title and body together); ids in ``ignore`` (special tokens)
    are never terms.

    Args:
        documents: one list of wordpiece ids per block; row i is block i.
        vocab_size: the tokenizer's size (ids are < vocab_size).
        k1, b: BM25's term-frequency saturation and length normalisation (Lucene's defaults 1.2 / 0.75).
        ignore: ids that are not terms ([CLS], [SEP], [PAD], [MASK], [UNK]).
    """

    def __init__(
        self,
        documents: Sequence[Sequence[int]],
        vocab_size: int,
        *,
        k1: float = 1.2,
        b: float = 0.75,
        ignore: Iterable[int] = (),
    ) -> None:
        if not documents:
            raise ValueError("BM25Index needs at least one document")
        self.vocab_size = vocab_size
        self.ignore = frozenset(ignore)
        counts = [Counter(t for t in doc if t not in self.ignore) for doc in documents]
        lengths = [sum(c.values()) for c in counts]
        avgdl = max(sum(lengths) / len(lengths), 1e-9)
        df = Counter(t for c in counts for t in c)
        n = len(documents)
        self.idf = torch.zeros(vocab_size)
        for term, found in df.items():
            self.idf[term] = math.log(1 + (n - found + 0.5) / (found + 0.5))
        rows, cols, values = [], [], []
        for row, (c, length) in enumerate(zip(counts, lengths)):
            norm = k1 * (1 - b + b * length / avgdl)
            for term, tf in sorted(c.items()):
                rows.append(row)
                cols.append(term)
                values.append(tf * (k1 + 1) / (tf + norm))
        self.weights = torch.sparse_coo_tensor(
            torch.tensor([rows, cols], dtype=torch.long), torch.tensor(values), (n, vocab_size), check_invariants=True
        ).coalesce()
        """[N, V] sparse: block i's saturated term frequencies."""

    @property
    def num_vectors(self) -> int:
        return self.weights.shape[0]

    def query_vectors(self, queries: Sequence[Sequence[int]]) -> Tensor:
        """[Q, V] dense: each query's term counts times idf (ignored ids and unseen terms weigh 0)."""
        out = torch.zeros(len(queries), self.vocab_size)
        for row, query in enumerate(queries):
            for term in query:
                if term not in self.ignore:
                    out[row, term] += 1.0
        return out * self.idf

    def search(self, queries: Tensor, k: int) -> tuple[Tensor, Tensor]:
        """[Q, V] query vectors -> ([Q, min(k, N)] BM25 scores, [Q, min(k, N)] block ids), best first."""
        scores = torch.sparse.mm(self.weights, queries.float().cpu().T).T  # [Q, N]
        top, ids = scores.topk(min(k, self.num_vectors), dim=1)
        return top.to(queries.device), ids.to(queries.device, torch.int64)
