"""Where each question's candidate blocks come from in QA fine-tuning and evaluation.

``dense`` (ORQA/REALM): the live query tower searches the frozen index at every step. ``bm25``: BM25 over the blocks'
``title text`` (``realm.index.text_bm25``, as the real-text benches rank them) ranks every question once, when its
question set is built, and those ids replace the search. Everything after the search is the same: the candidates'
frozen embeddings give the live query tower's logits (the retriever loss and the retriever term of every span score
still train it), and the reader reads BM25's top ``reader_beam`` in BM25's order. That is the "BM25 retriever + the
same reader fine-tuning" row of a comparison: only where the blocks come from differs.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np

from realm.core.checks import Problems
from realm.data.block_store import BlockStore
from realm.index.text_bm25 import TextBM25, titled_texts

CandidateSource = Literal["dense", "bm25"]
CANDIDATE_SOURCES: tuple[str, ...] = typing.get_args(CandidateSource)


@dataclass(kw_only=True, slots=True)
class RetrievalConfig:
    """Which retriever proposes the blocks a question is trained and evaluated on."""

    candidates: CandidateSource = "dense"
    """``dense``: the live query tower's search of the frozen index (ORQA/REALM); ``bm25``: BM25 (bm25s) over the
    blocks' ``title text``, ranked once per question at start-up (needs ``pip install bm25s PyStemmer``)."""
    center_queries: bool | None = None
    """``dense`` only: each batch's queries are searched less their batch mean (the hubness correction pre-training's
    ``retriever.center_queries`` applies), so QA reads blocks picked as a retriever trained that way picks them. The
    retriever's scores in the loss and the span scores stay the raw inner products, as in pre-training. None: as the
    retriever QA starts from was trained (``init.run``'s ``retriever.center_queries``; false from a BERT or a saved
    retriever); fine-tuning records the resolved value in its model's manifest. A batch of one is searched raw."""

    def __post_init__(self) -> None:
        problems = Problems()
        if self.candidates not in CANDIDATE_SOURCES:
            problems.add(f"retrieval.candidates must be one of {CANDIDATE_SOURCES}, got {self.candidates!r}")
        if self.center_queries and self.candidates != "dense":
            problems.add("retrieval.center_queries centres the dense search's queries; bm25 has none to centre")
        problems.raise_if_any()


def store_bm25(store: BlockStore) -> TextBM25:
    """BM25 over every block of ``store`` as ``title text``; document number i is block i."""
    return TextBM25(titled_texts(*store.texts(range(len(store)))))


def bm25_candidates(bm25: TextBM25, questions: Sequence[str], depth: int) -> np.ndarray:
    """[Q, depth] int64 block ids of each question, BM25's best first; -1 past the number of blocks."""
    ranked = bm25.rank(questions, depth)
    out = np.full((len(questions), depth), -1, dtype=np.int64)
    out[:, : ranked.shape[1]] = ranked
    return out
