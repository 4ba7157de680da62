"""The shape of the BERTs every model is made of (both embedders and the encoder), or the pretrained BERT to start from."""

from __future__ import annotations

from dataclasses import dataclass

from transformers import BertConfig

from realm.core.checks import Problems
from realm.models.pretrained import read_bert_config


@dataclass(kw_only=True, slots=True)
class ModelConfig:
    """Shape of the BERTs (both embedders and the encoder), or pretrained weights to start from."""

    init_from: str | None = None
    """A BERT to start all three networks from (hub name or folder); None builds them from the shape below. Its
    vocabulary must be the run's (``data.tokenizer``: a size mismatch is refused); a folder without an MLM head
    gets one tied to its word embeddings (``KnowledgeAugmentedEncoder.from_pretrained``)."""
    hidden_size: int = 768
    """Width of the BERTs (768 for BERT-base)."""
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    dropout: float = 0.1

    def __post_init__(self) -> None:
        problems = Problems()
        if self.num_heads > 0 and self.hidden_size % self.num_heads:  # note: 0 heads is a size problem below
            problems.add(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        if min(self.hidden_size, self.num_layers, self.num_heads, self.intermediate_size) <= 0:
            problems.add("model sizes must be positive")
        if not 0.0 <= self.dropout < 1.0:
            problems.add(f"dropout must be in [0, 1), got {self.dropout}")
        problems.raise_if_any()

    def bert_config(self, vocab_size: int) -> BertConfig:
        """The ``BertConfig`` for a vocabulary of ``vocab_size`` (or the pretrained one's when ``init_from``)."""
        if self.init_from:
            return read_bert_config(self.init_from)
        return BertConfig(
            vocab_size=vocab_size,
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_layers,
            num_attention_heads=self.num_heads,
            intermediate_size=self.intermediate_size,
            max_position_embeddings=self.max_position_embeddings,
            hidden_dropout_prob=self.dropout,
            attention_probs_dropout_prob=self.dropout,
        )
