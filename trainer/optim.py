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
    retriever_lr_scale: float = 1.0
    """Learning rate of the embedders relative to ``lr``. Below 1 protects an ICT-trained retriever while the encoder
    still ignores the documents: its gradients are then mostly noise, and Adam turns noise into full-size steps."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm (0 disables clipping)."""
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-6

    def __post_init__(self) -> None:
        if self.lr <= 0 or self.retriever_lr_scale <= 0:
            raise ValueError(f"lr and retriever_lr_scale must be positive, got {self.lr}, {self.retriever_lr_scale}")
        if self.warmup_steps < 0 or self.weight_decay < 0 or self.max_grad_norm < 0:
            raise ValueError("warmup_steps, weight_decay and max_grad_norm must be >= 0")


def build_optimizer(model: nn.Module, cfg: OptimConfig, max_steps: int):
    """(optimizer, scheduler). Parameters under a ``retriever`` module get ``lr * retriever_lr_scale``; biases and
    LayerNorm weights get no weight decay; shared parameters (shared embedders) appear once."""
    groups: dict[tuple[bool, bool], list] = {}
    for name, param in model.named_parameters():  # named_parameters() de-duplicates shared modules
        if param.requires_grad:
            key = (
                name.startswith("retriever.") or name.split(".")[0] in ("query_embedder", "separate_doc_embedder"),
                param.ndim >= 2,
            )
            groups.setdefault(key, []).append(param)
    param_groups = [
        {
            "params": params,
            "lr": cfg.lr * (cfg.retriever_lr_scale if is_retriever else 1.0),
            "weight_decay": cfg.weight_decay if decay else 0.0,
        }
        for (is_retriever, decay), params in sorted(groups.items())
    ]
    optimizer = torch.optim.AdamW(param_groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps)
    scheduler = get_linear_schedule_with_warmup(optimizer, min(cfg.warmup_steps, max_steps), max(max_steps, 1))
    return optimizer, scheduler
