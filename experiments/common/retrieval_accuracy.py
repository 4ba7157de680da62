"""Retrieval accuracy of open-domain QA questions against a corpus, shared by the real-data benches: dense rankings
(BM25's are the library's ``realm.index.text_bm25.bm25_rankings``), DPR's top-k accuracy through the project's
``has_answer``, and which questions the corpus can answer.
"""

from __future__ import annotations

import logging
import unicodedata
from typing import Sequence

import numpy as np
import torch

from realm.core.logging import progress
from realm.data.packing import SpecialIds, pack_single, pad
from realm.index.mips import BruteForceIndex
from realm.models.retriever import Retriever
from realm.qa.datasets import QAExample
from realm.qa.metrics import compile_pattern, has_answer, nfd_tokens, top_k_accuracy

logger = logging.getLogger(__name__)

KS = (1, 5, 20)


@torch.inference_mode()
def embed_questions(
    retriever: Retriever, tokenizer, texts: Sequence[str], max_query_length: int, batch_size: int = 256
) -> torch.Tensor:
    """[Q, D] embeddings of ``[CLS] question [SEP]`` (as ``realm inspect`` embeds a query), shortest first."""
    special = SpecialIds.of(tokenizer)
    ids = tokenizer(list(texts), add_special_tokens=False, truncation=True, max_length=max_query_length - 2)
    ids = ids["input_ids"]
    order = np.argsort([len(x) for x in ids], kind="stable")
    out = torch.empty(len(texts), retriever.query_embedder.projection.out_features)
    was_training = retriever.training
    retriever.eval()
    device = next(retriever.parameters()).device  # note: the queries go where the model is (a GPU in --gpu)
    bar = progress(len(order), "embedding questions", unit="question")
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        q_ids, q_mask = pad([pack_single(ids[i], special, max_query_length) for i in rows], special.pad)
        out[torch.from_numpy(rows)] = retriever.embed_queries(q_ids.to(device), q_mask.to(device)).float().cpu()
        bar.update(len(rows))
    bar.close()
    retriever.train(was_training)
    return out


def dense_rankings(docs: torch.Tensor, queries: torch.Tensor, k: int) -> list[list[int]]:
    """Row numbers of ``docs`` by exact inner-product search, best first."""
    index = BruteForceIndex(docs)
    rankings = []
    for start in range(0, len(queries), 1024):
        _, ids = index.search(queries[start : start + 1024], min(k, len(docs)))
        rankings.extend(ids.tolist())
    return rankings


def hit_rows(rankings: Sequence[Sequence[int]], texts: Sequence[str], questions: Sequence[QAExample],
             k: int = max(KS), known: dict[tuple[int, int], bool] | None = None) -> list[list[bool]]:  # fmt: skip
    """``has_answer`` rows for ``top_k_accuracy``, each ending at its first hit (``top_k_accuracy`` asks only whether
    any of a row's first k entries is a hit, so a row cut after its first hit gives the same accuracy for every k).

    ``known``: ``has_answer`` of (question number, text number) pairs already asked, filled in as they are asked; one
    dict shared by several retrievers over the same questions and texts spares the calls their rankings share.
    """
    known = {} if known is None else known
    rows = []
    for q, (question, ranked) in enumerate(zip(questions, rankings)):
        row = []
        for doc in ranked[:k]:
            if (q, doc) not in known:
                known[q, doc] = has_answer(texts[doc], question.answers, regex=question.answers_are_regex)
            row.append(known[q, doc])
            if row[-1]:
                break
        rows.append(row)
    return rows


def answerable(questions: Sequence[QAExample], texts: Sequence[str]) -> list[bool]:
    """Whether an answer of each question occurs anywhere in the corpus, by ``has_answer``'s own rule (a contiguous
    run of its tokens; a regex search for CuratedTrec), so that top-k accuracy over these questions has ceiling 1."""
    # note: one token string for the whole corpus, with a separator no token can equal, so a run never spans blocks
    tokens = " \x00 ".join(" ".join(nfd_tokens(t)) for t in texts)
    corpus = f" {tokens} "
    nfd = "\n\n".join(unicodedata.normalize("NFD", t) for t in texts)
    out = []
    for q in questions:
        if q.answers_are_regex:
            out.append(any(compile_pattern(p).search(nfd) is not None for p in q.answers))
        else:
            runs = (" ".join(nfd_tokens(a)) for a in q.answers)
            out.append(any(run and f" {run} " in corpus for run in runs))
    return out


def accuracy_row(rankings: Sequence[Sequence[int]], texts: Sequence[str], questions: Sequence[QAExample],
                 can_answer: Sequence[bool]) -> dict[str, float]:  # fmt: skip
    """``top_k`` over all questions and ``top_k_answerable`` over those the corpus can answer, for k in ``KS``."""
    rows = hit_rows(rankings, texts, questions)
    every = top_k_accuracy(rows, KS)
    kept = [row for row, ok in zip(rows, can_answer) if ok]
    some = top_k_accuracy(kept, KS) if kept else {k: float("nan") for k in KS}
    return {**{f"top_{k}": every[k] for k in KS}, **{f"top_{k}_answerable": some[k] for k in KS}}
