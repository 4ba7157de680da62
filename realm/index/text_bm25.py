"""BM25 over block text with bm25s: the lexical retriever of the real-text benches and of QA fine-tuning's
``retrieval.candidates=bm25``.

Lucene BM25 (k1 1.5, b 0.75) over words with English stop words removed and the Snowball stemmer applied, indexing
each block as ``title text``. Unlike ``realm.index.bm25.BM25Index`` (wordpieces, searched as an inner-product index
so that a pre-training reader can read its top-k), it sees the words a lexical baseline on real text sees. bm25s and
PyStemmer are optional packages (``pip install bm25s PyStemmer``), imported only when a ranker is built.
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from realm.core.errors import MissingPackageError

K1, B = 1.5, 0.75


def titled_texts(titles: Sequence[str], texts: Sequence[str]) -> list[str]:
    """``title text`` of each block: what BM25 indexes (and what the benches search for answers)."""
    return [f"{title} {text}" for title, text in zip(titles, texts)]


class TextBM25:
    """bm25s over ``docs`` (indexed once); ``rank`` gives document numbers (rows of ``docs``), best first."""

    def __init__(self, docs: Sequence[str]) -> None:
        # note: bm25s imports JAX where it is installed (for its top-k), and JAX takes 75% of a GPU's memory when it
        # first runs; beside a torch trainer or a second bench process on the same GPU that failed cuBLAS's allocation
        # (H100, two real_open_qa.py seeds side by side). Allocating as needed leaves the GPU to torch.
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        try:
            import bm25s
            import Stemmer
        except ImportError as err:
            hint = "BM25 over text needs bm25s and PyStemmer (pip install bm25s PyStemmer)"
            raise MissingPackageError(f"{err}: {hint}") from None
        if not docs:
            raise ValueError("TextBM25 needs at least one document")
        self._bm25s, self._stemmer = bm25s, Stemmer.Stemmer("english")
        self._retriever = bm25s.BM25(method="lucene", k1=K1, b=B)
        self._retriever.index(self._tokenize(docs), show_progress=False)
        self.num_docs = len(docs)

    def _tokenize(self, texts: Sequence[str]):
        return self._bm25s.tokenize(list(texts), stopwords="en", stemmer=self._stemmer, show_progress=False)

    def rank(self, queries: Sequence[str], k: int) -> np.ndarray:
        """[Q, min(k, N)] int64 document numbers of each query, best first."""
        if not queries:
            return np.zeros((0, min(k, self.num_docs)), dtype=np.int64)
        ranked, _ = self._retriever.retrieve(self._tokenize(queries), k=min(k, self.num_docs), show_progress=False)
        return np.asarray(ranked, dtype=np.int64)

    @property
    def settings(self) -> dict:
        """What a result table records about this ranker."""
        return {"package": f"bm25s {self._bm25s.__version__}", "method": "lucene", "k1": K1, "b": B,
                "stopwords": "en", "stemmer": "snowball english"}  # fmt: skip


def bm25_rankings(docs: Sequence[str], queries: Sequence[str], k: int) -> tuple[list[list[int]], dict]:
    """Document numbers ranked by ``TextBM25`` over ``docs`` for each query (top ``k``), and the settings used."""
    bm25 = TextBM25(docs)
    return bm25.rank(queries, k).tolist(), bm25.settings
