"""The knowledge-augmented encoder: BertForMaskedLM over ``[CLS] masked query [SEP] block body [SEP]``.

The MLM head (transform + decoder over the vocabulary) is evaluated only at the masked positions: with a few masked
wordpieces per query it is the largest matmul of the step otherwise (DESIGN.md measures ~4x on these cores).
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from torch import Tensor, nn
from transformers import BertConfig, BertForMaskedLM

from realm.models.pretrained import TRAINING_DTYPE, has_mlm_head, read_bert_config

logger = logging.getLogger(__name__)


class KnowledgeAugmentedEncoder(nn.Module):
    """Wraps a ``BertForMaskedLM``; save/load go through its own ``save_pretrained``/``from_pretrained``."""

    def __init__(self, mlm: BertForMaskedLM) -> None:
        super().__init__()
        self.mlm = mlm

    @classmethod
    def from_config(cls, config: BertConfig) -> "KnowledgeAugmentedEncoder":
        return cls(BertForMaskedLM(config))

    @classmethod
    def from_pretrained(cls, name_or_path: str | Path) -> "KnowledgeAugmentedEncoder":
        """A saved ``BertForMaskedLM`` loads exactly, its head included. A BERT without an MLM head (a
        sentence-embedding ``BertModel``) gets a decoder that *is* its word-embedding matrix (BERT's own tying) and
        a new transform and bias, which the reader warm-up trains."""
        read_bert_config(name_or_path)  # note: a one-line error for a folder that is not a BERT
        if has_mlm_head(name_or_path):
            return cls(BertForMaskedLM.from_pretrained(name_or_path, dtype=TRAINING_DTYPE))
        # note: tied even where the folder's config says tie_word_embeddings=false: with no decoder saved, untied
        # would mean a random vocabulary matrix; tied, the decoder scores with the embeddings the model learned
        mlm = BertForMaskedLM.from_pretrained(name_or_path, tie_word_embeddings=True, dtype=TRAINING_DTYPE)
        logger.info("%s has no MLM head: the decoder is tied to its word embeddings; the head's transform and bias "
                    "are new and are trained by the reader warm-up (`realm warmup`)", name_or_path)  # fmt: skip
        return cls(mlm)

    def save_pretrained(self, path: str | Path) -> None:
        self.mlm.save_pretrained(path)

    @property
    def config(self) -> BertConfig:
        return self.mlm.config

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor, mask_positions: Tensor
    ) -> Tensor:
        """Log-probabilities over the vocabulary at the masked positions.

        Args:
            input_ids, attention_mask, token_type_ids: [N, L] packed ``[CLS] query [SEP] body [SEP]`` inputs.
            mask_positions: [N, M] positions (into L) of the masked wordpieces; padding entries may point anywhere.

        Returns:
            [N, M, V] log p(token | z, x) at each masked position.
        """
        hidden = self.mlm.bert(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        index = mask_positions.unsqueeze(-1).expand(-1, -1, hidden.shape[-1])
        selected = hidden.gather(1, index)  # [N, M, H]
        return torch.log_softmax(self.mlm.cls(selected).float(), dim=-1)
