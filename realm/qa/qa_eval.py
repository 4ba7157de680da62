"""Open-domain QA evaluation: predictions and metrics of an ``OpenQAModel`` over a frozen index, batched.

Per question: retrieve the top ``max(top_k)`` blocks (or take its fixed candidates: ``realm.qa.candidates``), read
the top ``reader_beam`` of them, predict the best span. Metrics: exact match (``regex_match`` for regex answers, as
ORQA scores CuratedTrec), DPR top-k retrieval accuracy, and the share of questions whose read blocks hold a correct
candidate span (the reader's ceiling). With an ``accelerator`` of N processes, each process evaluates a contiguous
1/N of the questions and every process gets all records (in file order) and the metrics over all of them.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import numpy as np
import torch
from accelerate.utils import gather_object

from realm.core.logging import progress
from realm.data.block_store import BlockStore
from realm.data.packing import SpecialIds
from realm.index.mips import DocumentIndex
from realm.models.reader import ReaderConfig
from realm.index.text_bm25 import TextBM25
from realm.qa.batch import QABatch, QACollator, QuestionSet, attach_blocks, beam_size
from realm.qa.candidates import RetrievalConfig, bm25_candidates, store_bm25
from realm.qa.datasets import QAExample
from realm.qa.metrics import exact_match, regex_match, top_k_accuracy
from realm.qa.model import OpenQAModel, best_spans
from realm.qa.spans import Wordpieces

DEFAULT_TOP_K = (1, 5, 20, 100)


@dataclass
class QAContext:
    """The frozen side of fine-tuning and evaluation: corpus, index, tokenizer pieces and reader shape."""

    store: BlockStore
    index: DocumentIndex
    embeddings: np.ndarray
    """[N, D] frozen block embeddings; row i is block i (the index's vectors)."""
    words: Wordpieces
    special: SpecialIds
    reader: ReaderConfig
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    _bm25: TextBM25 | None = field(default=None, init=False, repr=False)
    """Built on first use and kept, so the training and dev sets share one BM25 index."""

    def question_set(self, examples: Sequence[QAExample], beam: int) -> QuestionSet:
        """``examples`` tokenised for the reader; with ``retrieval.candidates=bm25`` each also carries BM25's top
        blocks for a retriever beam of ``beam`` (ranked here, once)."""
        candidates = None
        if self.retrieval.candidates == "bm25":
            if self._bm25 is None:
                self._bm25 = store_bm25(self.store)
            candidates = bm25_candidates(self._bm25, [e.question for e in examples], beam_size(beam, self.reader))
        return QuestionSet(examples, self.words.tokenizer, self.reader.max_question_length, candidates)

    def attach(self, batch: QABatch, query_embeddings: torch.Tensor | None, questions: QuestionSet,
               beam: int) -> QABatch:  # fmt: skip
        """``batch`` with its blocks: the question set's fixed candidates (``query_embeddings`` unused, may be None),
        or the frozen index's search for ``query_embeddings``."""
        if self.retrieval.candidates == "bm25" and questions.candidates is None:
            # note: without this, a set built around question_set would silently be read from the dense search
            raise ValueError("retrieval.candidates is bm25 but the question set has no candidates: build it with "
                             "QAContext.question_set")  # fmt: skip
        return attach_blocks(
            batch, query_embeddings, self.index, self.embeddings, self.store, questions, self.words, self.special,
            self.reader, beam, bool(self.retrieval.center_queries),
        )  # fmt: skip


def question_batches(
    questions: QuestionSet, ctx: QAContext, batch_size: int, rows: Sequence[int] | None = None
) -> Iterator[QABatch]:
    """The questions ``rows`` (default: all) in that order."""
    rows = list(range(len(questions))) if rows is None else list(rows)
    collate = QACollator(questions, ctx.special, ctx.reader.max_question_length)
    for start in range(0, len(rows), batch_size):
        yield collate(rows[start : start + batch_size])


def shard_rows(num_rows: int, rank: int, world_size: int) -> range:
    """Rank ``rank``'s contiguous share of ``num_rows`` rows (sizes differ by at most one; rank order = row order)."""
    return range(num_rows * rank // world_size, num_rows * (rank + 1) // world_size)


def qa_metrics(records: list[dict[str, Any]], top_k: tuple[int, ...] = DEFAULT_TOP_K) -> dict[str, float]:
    """Exact match, top-k retrieval accuracy and the reader's ceiling over prediction records."""
    n = max(len(records), 1)
    metrics = {"exact_match": sum(r["correct"] for r in records) / n, "num_questions": len(records)}
    for k, acc in top_k_accuracy([r["has_answer"] for r in records], top_k).items():
        metrics[f"top{k}_accuracy"] = acc
    metrics["correct_span_in_read_blocks"] = sum(r["span_in_read_blocks"] for r in records) / n
    return metrics


def is_correct(prediction: str, answers: list[str], regex: bool) -> bool:
    return regex_match(prediction, answers) if regex else exact_match(prediction, answers)


@torch.inference_mode()
def evaluate_qa(
    model: OpenQAModel,
    questions: QuestionSet,
    ctx: QAContext,
    *,
    batch_size: int = 16,
    top_k: tuple[int, ...] = DEFAULT_TOP_K,
    device: torch.device | str | None = None,
    accelerator: Any = None,
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """(metrics, one prediction record per question in order).

    A record holds the question, gold answers, prediction, whether it is correct, whether a correct span was in the
    read blocks, and for the top ``max(top_k)`` blocks their ids, titles, retriever scores and ``has_answer``. With
    an ``accelerator`` of several processes, call it on every process: each evaluates its shard of the questions.
    ``device`` defaults to the accelerator's, or the CPU.
    """
    if device is None:
        device = accelerator.device if accelerator else "cpu"
    rank, world_size = (accelerator.process_index, accelerator.num_processes) if accelerator else (0, 1)
    autocast = accelerator.autocast if accelerator else contextlib.nullcontext
    rows = shard_rows(len(questions), rank, world_size)
    was_training = model.training
    model.eval()
    records: list[dict[str, Any]] = []
    bar = progress(len(rows), "evaluating QA", unit="question", enabled=rank == 0)
    for batch in question_batches(questions, ctx, batch_size, rows):
        batch = batch.to(device)
        # note: the accelerator's precision (bf16 autocast where the job runs bf16); searched in fp32
        with autocast():
            # note: fixed (BM25) candidates need no search, so no query pass before the model's own
            query = model.embed_queries(batch).float() if questions.candidates is None else None
        batch = ctx.attach(batch, query, questions, max(top_k)).to(device)
        with autocast():
            out = model(batch)
        blocks = batch.blocks
        spans = best_spans(out.reader_logits.float(), blocks.span_valid)
        in_read_blocks = (blocks.span_correct & blocks.span_valid).flatten(1).any(1).tolist()
        ids = blocks.block_ids.cpu()
        titles, _ = ctx.store.texts([max(int(i), 0) for i in ids.reshape(-1).tolist()])
        for b, (row, span) in enumerate(zip(batch.example_ids.tolist(), spans)):
            example = questions.examples[row]
            prediction = ""
            if span is not None:
                prediction = ctx.words.decode(blocks.reader_input_ids[b, span.slot, span.start : span.end + 1].tolist())
            valid = blocks.block_valid[b].cpu()
            records.append(
                {
                    "id": example.id,
                    "question": example.question,
                    "answers": list(example.answers),
                    "answers_are_regex": example.answers_are_regex,
                    "prediction": prediction,
                    "correct": is_correct(prediction, list(example.answers), example.answers_are_regex),
                    "span_in_read_blocks": in_read_blocks[b],
                    "prediction_block": int(ids[b, span.slot]) if span is not None else -1,
                    "prediction_score": span.score if span is not None else None,
                    "block_ids": ids[b][valid].tolist(),
                    "titles": [t for t, ok in zip(titles[b * ids.shape[1] : (b + 1) * ids.shape[1]], valid) if ok],
                    "scores": [
                        round(s, 4) for s in out.retriever_logits[b][valid.to(out.retriever_logits.device)].tolist()
                    ],
                    "has_answer": blocks.has_answer[b][valid].tolist(),
                }
            )
        bar.update(batch.size)
    bar.close()
    model.train(was_training)
    if world_size > 1:
        records = gather_object(records)  # note: concatenated in rank order, which is row order
    return qa_metrics(records, top_k), records
