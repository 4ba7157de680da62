"""AdamW with linear warm-up and decay (REALM: AdamW, lr 3e-5, warm-up)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import get_linear_schedule_with_warmup


@dataclass(kw_only=True, slots=True)
class OptimConfig:
    lr: float = 3e-5
    """Peak learning rate."""
    weight_decay: float = 0.01
    """Decoupled weight decay, not applied to biases and LayerNorm weights."""
    warmup_steps: int = 10_000
    """Linear warm-up from 0 to ``lr``, then linear decay to 0 at the last step."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm (0 disables clipping)."""
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-6

    def __post_init__(self) -> None:
        if self.lr <= 0:
            raise ValueError(f"lr must be positive, got {self.lr}")
        if self.warmup_steps < 0 or self.weight_decay < 0 or self.max_grad_norm < 0:
            raise ValueError("warmup_steps, weight_decay and max_grad_norm must be >= 0")


def build_optimizer(model: nn.Module, cfg: OptimConfig, max_steps: int):
    """(optimizer, scheduler); shared parameters (shared embedders) appear once."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():  # named_parameters() de-duplicates shared modules
        if param.requires_grad:
            (no_decay if param.ndim < 2 else decay).append(param)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps)
    scheduler = get_linear_schedule_with_warmup(optimizer, min(cfg.warmup_steps, max_steps), max(max_steps, 1))
    return optimizer, scheduler
