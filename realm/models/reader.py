"""The ORQA/REALM span reader: BERT over ``[CLS] question [SEP] block body [SEP]`` and an MLP span scorer.

A span (i, j) of a block is scored by MLP([h_i; h_j]) with one hidden layer (256 units in ORQA/REALM). The first
layer applied to the concatenation equals ``W_start h_i + W_end h_j``, so both projections are computed once per
wordpiece and every span costs one add, ReLU, LayerNorm and dot product — no [N, L, L, 2H] tensor.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import BertConfig, BertModel, BertPreTrainedModel

from realm.core.checks import Problems
from realm.models.pretrained import LoadsInTrainingDtype


@dataclass(kw_only=True, slots=True)
class ReaderConfig:
    """Shape of the reader and of its inputs."""

    span_hidden_size: int = 256
    """Hidden units of the span-scoring MLP (256 in ORQA/REALM)."""
    max_span_width: int = 10
    """Longest answer span in wordpieces (10 in ORQA/REALM)."""
    reader_beam: int = 5
    """Top retrieved blocks the reader reads per question (5 in ORQA/REALM)."""
    max_question_length: int = 64
    """Wordpieces of a question for the query embedder and the reader, [CLS]/[SEP] included."""
    max_sequence_length: int = 320
    """Wordpieces of a reader input ``[CLS] question [SEP] body [SEP]``; the body is cut to fit."""

    def __post_init__(self) -> None:
        problems = Problems()
        if min(self.span_hidden_size, self.max_span_width, self.reader_beam) <= 0:
            problems.add("span_hidden_size, max_span_width and reader_beam must be positive")
        if self.max_question_length < 3 or self.max_sequence_length < self.max_question_length + 2:
            problems.add(
                f"max_question_length ({self.max_question_length}) must be >= 3 and max_sequence_length "
                f"({self.max_sequence_length}) must leave room for a body after the question"
            )
        problems.raise_if_any()


def reader_config(bert_config: BertConfig, span_hidden_size: int) -> BertConfig:
    """A copy of ``bert_config`` that records the span MLP's width, so ``from_pretrained`` rebuilds the reader."""
    config = BertConfig.from_dict(bert_config.to_dict())
    config.span_hidden_size = span_hidden_size
    return config


class SpanReader(LoadsInTrainingDtype, BertPreTrainedModel):
    """Scores every span of up to ``max_span_width`` wordpieces; ``save_pretrained`` writes safetensors.

    ``SpanReader.from_pretrained(folder, config=reader_config(...))`` starts the BERT from any saved ``BertModel``,
    ``BertForMaskedLM`` (a pre-training run's encoder) or ``SpanReader``: all keep the BERT under ``bert.``.
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        hidden = getattr(config, "span_hidden_size", 256)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.start_projection = nn.Linear(config.hidden_size, hidden)
        # note: one bias is enough: the two halves of the first layer are summed
        self.end_projection = nn.Linear(config.hidden_size, hidden, bias=False)
        self.span_norm = nn.LayerNorm(hidden, eps=config.layer_norm_eps)
        self.span_output = nn.Linear(hidden, 1)
        self.post_init()

    def forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor, max_span_width: int) -> Tensor:
        """[N, L] reader inputs -> [N, L, W] span scores; entry (n, i, w) scores the span from i to i + w.

        Spans that run past the sequence get a score too (from zero padding); callers mask them with
        ``realm.qa.spans.candidate_span_mask``.
        """
        hidden = self.bert(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        starts = self.start_projection(hidden)  # [N, L, S]
        ends = F.pad(self.end_projection(hidden), (0, 0, 0, max_span_width - 1))  # [N, L + W - 1, S]
        ends = ends.unfold(1, max_span_width, 1).transpose(2, 3)  # [N, L, W, S]: ends[n, i, w] = end(i + w)
        spans = self.span_norm(torch.relu(starts.unsqueeze(2) + ends))
        return self.span_output(spans).squeeze(-1).float()
