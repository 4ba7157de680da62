"""Batches for open-domain QA: tokenised questions, then the retrieved blocks with reader inputs and span labels.

As in pre-training, the collator only packs questions; ``attach_blocks`` runs once the query embedder has searched
the frozen index (a question set with fixed candidates, e.g. BM25's from ``realm.qa.candidates``, replaces the
search). It fills, for the retriever beam (R blocks), the frozen document embeddings and whether each block contains
an answer (DPR ``has_answer`` on the block text), and for the top K blocks (the reader beam) the packed
``[CLS] question [SEP] body [SEP]`` inputs with their candidate and correct spans.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from realm.data.block_store import BlockStore
from realm.data.packing import Movable, Ragged, SpecialIds, pack_ragged_pairs, pack_single, pad
from realm.index.mips import DocumentIndex, centered_queries
from realm.models.reader import ReaderConfig
from realm.qa.datasets import QAExample
from realm.qa.metrics import has_answer
from realm.qa.spans import Wordpieces, candidate_span_mask, correct_span_mask

logger = logging.getLogger(__name__)


class QuestionSet(Dataset):
    """Questions with their wordpieces (and plain answers' wordpieces), tokenised once; items are row numbers.

    ``candidates`` ([Q, C] int64 block ids, best first, -1 padded), when given, are each question's fixed candidate
    blocks: ``attach_blocks`` reads them instead of searching the index.
    """

    def __init__(
        self, examples: Sequence[QAExample], tokenizer, max_question_length: int, candidates: np.ndarray | None = None
    ) -> None:
        self.examples = list(examples)
        if candidates is not None and len(candidates) != len(self.examples):
            raise ValueError(f"{len(candidates)} candidate rows for {len(self.examples)} questions")
        self.candidates = candidates
        questions = tokenizer([e.question for e in self.examples], add_special_tokens=False)["input_ids"]
        self.question_ids = [ids[: max_question_length - 2] for ids in questions]
        truncated = sum(len(ids) > max_question_length - 2 for ids in questions)
        if truncated:
            logger.warning("%d of %d questions are longer than %d wordpieces and were truncated",
                           truncated, len(questions), max_question_length - 2)  # fmt: skip
        plain = [a for e in self.examples if not e.answers_are_regex for a in e.answers]
        encoded = iter(tokenizer(plain, add_special_tokens=False)["input_ids"] if plain else [])
        self.answer_ids = [[] if e.answers_are_regex else [next(encoded) for _ in e.answers] for e in self.examples]

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, key: int | tuple[int, int]) -> int:
        return int(key[1] if isinstance(key, tuple) else key)  # StepBatchSampler yields (epoch, row)

    def span_answers(self, row: int) -> list:
        """What ``correct_span_mask`` takes for this question: answer wordpieces, or the patterns for regexes."""
        example = self.examples[row]
        return list(example.answers) if example.answers_are_regex else self.answer_ids[row]


@dataclass
class RetrievedBlocks(Movable):
    """Shapes: B questions, R retrieved blocks (retriever beam), K read blocks, L reader length, W span widths."""

    block_ids: Tensor
    """[B, R] int64 block ids in retrieval order; -1 where fewer than R blocks exist."""
    block_valid: Tensor
    """[B, R] bool."""
    doc_embeddings: Tensor
    """[B, R, D] frozen embeddings of the blocks (from the index), for the retriever logits."""
    has_answer: Tensor
    """[B, R] bool: the block's text contains an answer."""
    reader_input_ids: Tensor
    """[B, K, L] ``[CLS] question [SEP] body [SEP]`` of the top K blocks."""
    reader_attention_mask: Tensor
    reader_token_type_ids: Tensor
    span_valid: Tensor
    """[B, K, L, W] bool: candidate spans."""
    span_correct: Tensor
    """[B, K, L, W] bool: spans that are an answer."""


@dataclass
class QABatch(Movable):
    query_input_ids: Tensor
    """[B, Lq] ``[CLS] question [SEP]``."""
    query_attention_mask: Tensor
    example_ids: Tensor
    """[B] row of each question in its ``QuestionSet``."""
    blocks: RetrievedBlocks | None = None

    @property
    def size(self) -> int:
        return self.query_input_ids.shape[0]


class QACollator:
    def __init__(self, questions: QuestionSet, special: SpecialIds, max_question_length: int) -> None:
        self.questions, self.special, self.max_question_length = questions, special, max_question_length

    def __call__(self, rows: Sequence[int]) -> QABatch:
        packed = [pack_single(self.questions.question_ids[r], self.special, self.max_question_length) for r in rows]
        ids, mask = pad(packed, self.special.pad)
        return QABatch(ids, mask, torch.tensor(list(rows), dtype=torch.long))


def beam_size(retriever_beam: int, cfg: ReaderConfig) -> int:
    """Blocks retrieved per question: the retriever beam, or the reader beam when that is larger."""
    return max(retriever_beam, cfg.reader_beam)


def candidate_ids(questions: QuestionSet, rows: list[int], query_embeddings: Tensor | None, index: DocumentIndex,
                  beam: int, center_queries: bool = False) -> Tensor:  # fmt: skip
    """[B, beam] int64 block ids of the questions ``rows``: their fixed candidates when the set has them (the index
    is not searched, and ``query_embeddings`` may be None), else the frozen index's top ``beam`` for
    ``query_embeddings`` (less their batch mean with ``center_queries``, as pre-training's search can)."""
    if questions.candidates is None:
        if query_embeddings is None:
            raise ValueError("the question set has no fixed candidates, so the index search needs query embeddings")
        queries = query_embeddings.detach().float().cpu()
        _, ids = index.search(centered_queries(queries) if center_queries else queries, beam)
        return ids.cpu()
    if questions.candidates.shape[1] < beam:
        # note: a shallower set would silently shorten the beam (and the top-k columns of an evaluation)
        depth = questions.candidates.shape[1]
        raise ValueError(f"the question set has {depth} candidates per question, fewer than the beam of {beam}")
    return torch.from_numpy(questions.candidates[rows, :beam]).long()


@torch.no_grad()
def attach_blocks(
    batch: QABatch,
    query_embeddings: Tensor | None,
    index: DocumentIndex,
    embeddings: np.ndarray,
    store: BlockStore,
    questions: QuestionSet,
    words: Wordpieces,
    special: SpecialIds,
    cfg: ReaderConfig,
    retriever_beam: int,
    center_queries: bool = False,
) -> QABatch:
    """Searches the frozen ``index`` (whose row i is ``embeddings[i]`` = block i), or takes the question set's fixed
    candidates, and fills ``batch.blocks``."""
    rows = batch.example_ids.tolist()
    ids = candidate_ids(questions, rows, query_embeddings, index, beam_size(retriever_beam, cfg), center_queries)
    valid = ids >= 0
    flat = ids.clamp(min=0).reshape(-1).numpy()
    doc_embeddings = torch.from_numpy(np.ascontiguousarray(embeddings[flat], dtype=np.float32)).view(*ids.shape, -1)

    present = sorted({int(i) for i in ids[valid].tolist()})
    _, texts = store.texts(present)
    text_of = dict(zip(present, texts))
    contains = torch.zeros(ids.shape, dtype=torch.bool)
    for b, row in enumerate(rows):
        example = questions.examples[row]
        for r, block in enumerate(ids[b].tolist()):
            if block >= 0:
                contains[b, r] = has_answer(text_of[block], example.answers, regex=example.answers_are_regex)

    read = ids[:, : cfg.reader_beam]
    beam = read.shape[1]
    slots = read.reshape(-1).numpy()
    _, bodies = store.ragged(slots[slots >= 0])
    reader = pack_ragged_pairs(
        Ragged.of([questions.question_ids[row] for row in rows]).take(np.repeat(np.arange(len(rows)), beam)),
        bodies.spread(slots >= 0),  # note: a missing block is read as an empty body
        special,
        cfg.max_sequence_length,
    )
    reader_ids, reader_mask, reader_types = reader["input_ids"], reader["attention_mask"], reader["token_type_ids"]
    span_answers = [questions.span_answers(row) for row in rows for _ in range(beam)]
    span_regex = [questions.examples[row].answers_are_regex for row in rows for _ in range(beam)]
    span_valid = candidate_span_mask(reader_ids, reader_types, words, cfg.max_span_width)
    span_correct = correct_span_mask(
        reader_ids, reader_types, span_answers, span_regex, words, cfg.max_span_width, candidates=span_valid
    )
    shape = (len(rows), beam, reader_ids.shape[1])
    batch.blocks = RetrievedBlocks(
        block_ids=ids,
        block_valid=valid,
        doc_embeddings=doc_embeddings,
        has_answer=contains,
        reader_input_ids=reader_ids.view(shape),
        reader_attention_mask=reader_mask.view(shape),
        reader_token_type_ids=reader_types.view(shape),
        span_valid=span_valid.view(*shape, -1),
        span_correct=span_correct.view(*shape, -1),
    )
    return batch
