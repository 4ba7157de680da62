"""What a fine-tuned QA model answers to free questions, beside the blocks it retrieved (``realm inspect QA_RUN``).

The questions go through ``evaluate_qa``, the same path as ``realm evaluate`` (retrieve, read the top
``reader_beam`` blocks, take the best span), with no reference answers; each answer comes back with its top-k blocks:
rank, retriever score, block id, title, text, and which of them the answer span was read from.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

from realm.qa.datasets import QAExample
from realm.qa.model import OpenQAModel
from realm.qa.qa_eval import QAContext, evaluate_qa


@dataclass(kw_only=True, slots=True)
class InspectedBlock:
    """One retrieved block of a question."""

    rank: int
    score: float
    """The retriever's score (inner product of the question's and the block's embeddings)."""
    block: int
    """Row of the frozen index's blocks."""
    title: str
    text: str
    answer: bool
    """Whether the reader's answer span was read from this block."""


@dataclass(kw_only=True, slots=True)
class InspectedAnswer:
    """The reader's answer to one question and the blocks behind it."""

    query: str
    answer: str
    """The predicted span ("" when no block held a valid span)."""
    answer_block: int
    """The block the span was read from (-1: none)."""
    answer_rank: int
    """That block's rank among everything retrieved (0: none); it may lie past ``k`` when the reader beam is wider."""
    answer_score: float | None
    """The reader's span score."""
    blocks: list[InspectedBlock]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def answer_questions(
    model: OpenQAModel, ctx: QAContext, questions: Sequence[str], k: int, batch_size: int = 16
) -> list[InspectedAnswer]:
    """The reader's answer to each of ``questions`` (in order) with its top ``k`` blocks."""
    examples = [QAExample(question=q, answers=[], answers_are_regex=False, id=f"query-{i}") for i, q in
                enumerate(questions)]  # fmt: skip
    _, records = evaluate_qa(model, ctx.question_set(examples, k), ctx, batch_size=batch_size, top_k=(k,))
    out = []
    for record in records:
        ids = record["block_ids"]
        _, texts = ctx.store.texts(ids[:k])
        source = record["prediction_block"]
        blocks = [
            InspectedBlock(rank=rank, score=score, block=block, title=title, text=text, answer=block == source)
            for rank, (score, block, title, text) in
            enumerate(zip(record["scores"], ids, record["titles"], texts), start=1)
        ]  # fmt: skip
        out.append(InspectedAnswer(
            query=record["question"], answer=record["prediction"], answer_block=source,
            answer_rank=ids.index(source) + 1 if source in ids else 0, answer_score=record["prediction_score"],
            blocks=blocks,
        ))  # fmt: skip
    return out
