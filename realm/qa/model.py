"""The fine-tuned open-domain QA model: a trainable query tower over a frozen document index, and a span reader.

ORQA/REALM fine-tuning freezes the document embeddings (the index is never rebuilt) and trains the query embedder;
the retriever logit of a block is the inner product of the live query embedding with the block's frozen embedding,
and the reader logit of a span is its span score plus the retriever logit of its block.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from torch import Tensor, nn

from realm.models.reader import SpanReader
from realm.models.retriever import Embedder, retrieval_scores
from realm.qa.batch import QABatch
from realm.qa.loss import QALoss, open_qa_loss


@dataclass
class QAOutput:
    retriever_logits: Tensor
    """[B, R] live query embedding . frozen block embedding."""
    reader_logits: Tensor
    """[B, K, L, W] span score + retriever logit of the span's block."""

    def loss(self, batch: QABatch) -> QALoss:
        blocks = batch.blocks
        return open_qa_loss(
            self.retriever_logits,
            blocks.has_answer,
            blocks.block_valid,
            self.reader_logits,
            blocks.span_correct,
            blocks.span_valid,
        )


@dataclass
class BestSpan:
    slot: int
    """Rank of the block among the read blocks (0 = top retrieved)."""
    start: int
    """Position of the first wordpiece in the reader input."""
    end: int
    """Position of the last wordpiece (inclusive)."""
    score: float


def best_spans(reader_logits: Tensor, span_valid: Tensor) -> list[BestSpan | None]:
    """The highest-scoring candidate span of each question over its read blocks (None when it has none)."""
    bsz, _, length, width = reader_logits.shape
    scores = reader_logits.detach().float().masked_fill(~span_valid, float("-inf")).reshape(bsz, -1)
    best, flat = scores.max(dim=-1)
    out: list[BestSpan | None] = []
    for score, index in zip(best.tolist(), flat.tolist()):
        if score == float("-inf"):
            out.append(None)
            continue
        slot, rest = divmod(index, length * width)
        start, w = divmod(rest, width)
        out.append(BestSpan(slot=slot, start=start, end=start + w, score=score))
    return out


class OpenQAModel(nn.Module):
    QUERY_DIR, READER_DIR, META = "query_embedder", "reader", "qa_model.json"

    def __init__(self, query_embedder: Embedder, reader: SpanReader, max_span_width: int) -> None:
        super().__init__()
        self.query_embedder = query_embedder
        self.reader = reader
        self.max_span_width = max_span_width

    def embed_queries(self, batch: QABatch) -> Tensor:
        return self.query_embedder(batch.query_input_ids, batch.query_attention_mask)

    def forward(self, batch: QABatch) -> QAOutput:
        blocks = batch.blocks
        if blocks is None:
            raise ValueError("batch has no retrieved blocks: call realm.qa.batch.attach_blocks first")
        query = self.embed_queries(batch)
        retriever_logits = retrieval_scores(
            query.float(), blocks.doc_embeddings.float(), self.query_embedder.score_scale
        )
        bsz, num_read, length = blocks.reader_input_ids.shape
        spans = self.reader(
            blocks.reader_input_ids.view(-1, length),
            blocks.reader_attention_mask.view(-1, length),
            blocks.reader_token_type_ids.view(-1, length),
            self.max_span_width,
        ).view(bsz, num_read, length, self.max_span_width)
        return QAOutput(retriever_logits, spans + retriever_logits[:, :num_read, None, None])

    def save_pretrained(self, path: str | Path) -> None:
        """``query_embedder/`` and ``reader/`` (safetensors via ``save_pretrained``) plus ``qa_model.json``."""
        path = Path(path)
        self.query_embedder.save_pretrained(path / self.QUERY_DIR)
        self.reader.save_pretrained(path / self.READER_DIR)
        (path / self.META).write_text(json.dumps({"max_span_width": self.max_span_width}))

    @classmethod
    def from_pretrained(cls, path: str | Path) -> "OpenQAModel":
        path = Path(path)
        if not (path / cls.META).is_file():
            raise FileNotFoundError(f"{path} is not a saved QA model (no {cls.META})")
        meta = json.loads((path / cls.META).read_text())
        return cls(
            Embedder.from_pretrained(path / cls.QUERY_DIR),
            SpanReader.from_pretrained(path / cls.READER_DIR),
            int(meta["max_span_width"]),
        )
