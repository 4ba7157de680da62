"""The knowledge-augmented encoder: BertForMaskedLM over ``[CLS] masked query [SEP] block body [SEP]``.

The MLM head (transform + decoder over the vocabulary) is evaluated only at the masked positions: with a few masked
wordpieces per query it is the largest matmul of the step otherwise (DESIGN.md measures ~4x on these cores).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn
from transformers import BertConfig, BertForMaskedLM


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
        return cls(BertForMaskedLM.from_pretrained(name_or_path))

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
