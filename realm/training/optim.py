"""AdamW with linear warm-up and decay (REALM: AdamW, lr 3e-5, warm-up)."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from realm.core.checks import Problems

logger = logging.getLogger(__name__)

SCHEDULES = ("linear", "wsd")
# the AdamW kernel of each OptimConfig.implementation
IMPLEMENTATIONS = {"fused": {"fused": True}, "foreach": {"foreach": True}, "for_loop": {"foreach": False}}


@dataclass(kw_only=True, slots=True)
class OptimConfig:
    lr: float = 3e-5
    """Peak learning rate."""
    weight_decay: float = 0.01
    """Decoupled weight decay, not applied to biases and LayerNorm weights."""
    warmup_steps: int = 10_000
    """Linear warm-up from 0 to ``lr``, then ``schedule``."""
    schedule: str = "linear"
    """After warm-up: ``linear`` decay to 0 at the last step (BERT, REALM), or ``wsd`` (warm-up, stable, decay): the
    rate is held, then decays linearly to 0 over the last ``decay_steps``. A from-scratch reader learns to copy only
    after a phase change whose step is not known in advance (realm.pretrain.reader_warmup): a decay that starts at once
    can starve it just before, and no decay at all leaves it unannealed."""
    decay_steps: int = 0
    """``wsd`` only: the final steps over which the rate decays to 0 (0: held to the end)."""
    lr_base_width: int = 0
    """When > 0, every rate is scaled by ``lr_base_width / width``, width = the model's largest hidden size: the
    rates are tuned at that width and a wider model gets proportionally smaller ones (the 1/width rule of muP for
    Adam). Measured on the demo's reader warm-up: width 128 copies at 1e-3; width 256 never copies at 1e-3 (span
    accuracy 0.011 at step 1,500) and does at 5e-4 = 1e-3 x 128/256. 0: the rates are used as given."""
    retriever_lr_scale: float = 1.0
    """Learning rate of the embedders relative to ``lr``. Below 1 protects an ICT-trained retriever while the encoder
    still ignores the documents: its gradients are then mostly noise, and Adam turns noise into full-size steps."""
    retriever_warmup_steps: int | None = None
    """Warm-up of the embedders' rate alone (None: ``warmup_steps``, as every group). Longer than the encoder's, it
    holds the retriever's steps small until the reader reads the documents, when its gradients start to carry signal.
    Measured from a young (40-step ICT) retriever at ``retriever_lr_scale`` 1.0, 3 starts x 3 index schedules: with the
    encoder's 50 steps, 2 of the 9 runs lost their candidates at the rate's peak (held-out accuracy 0.015, 0.167); with
    200, none did, and all 9 ended better (+0.228 on average; experiments/demo/log/2026-11-25-evidence.md, "Index
    freshness")."""
    retriever_delay_steps: int = 0
    """Steps for which the embedders' rate is 0 before their warm-up begins (the encoder trains from step 0). Even a
    small warming-up rate moves the query tower while the reader cannot read yet, and those early steps can pull
    queries off their articles for good (docs/recipe.md, point 6)."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm (0 disables clipping)."""
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-6
    implementation: str = "fused"
    """AdamW kernel: ``fused`` (one kernel over all parameters, CPU and CUDA; clip + AdamW 2.8x faster than
    ``for_loop`` at the demo shape on CPU, ``benchmarks/step.py``), ``foreach`` (batched per-op kernels) or ``for_loop``
    (one parameter at a time). The same update up to float rounding."""

    def __post_init__(self) -> None:
        problems = Problems()
        if not (self.lr > 0 and self.retriever_lr_scale > 0):  # note: `not >` also refuses NaN (`<= 0` let it by)
            problems.add(f"lr and retriever_lr_scale must be positive, got {self.lr}, {self.retriever_lr_scale}")
        if self.implementation not in IMPLEMENTATIONS:
            problems.add(f"implementation must be one of {tuple(IMPLEMENTATIONS)}, got {self.implementation!r}")
        if self.schedule not in SCHEDULES:
            problems.add(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.lr_base_width < 0:
            problems.add(f"lr_base_width must be >= 0 (0: off), got {self.lr_base_width}")
        if not all(v >= 0 for v in (self.warmup_steps, self.weight_decay, self.max_grad_norm, self.decay_steps)):
            problems.add("warmup_steps, decay_steps, weight_decay and max_grad_norm must be >= 0")
        if self.retriever_warmup_steps is not None and self.retriever_warmup_steps < 0:
            problems.add(f"retriever_warmup_steps must be >= 0 (or unset), got {self.retriever_warmup_steps}")
        if self.retriever_delay_steps < 0:
            problems.add(f"retriever_delay_steps must be >= 0, got {self.retriever_delay_steps}")
        problems.raise_if_any()


def model_width(model: nn.Module) -> int:
    """The largest ``config.hidden_size`` (or GPT-2's ``n_embd``) of the Hugging Face models inside ``model``."""
    widths = [
        int(getattr(m.config, "hidden_size", 0) or getattr(m.config, "n_embd", 0) or 0)
        for m in model.modules()
        if hasattr(m, "config")
    ]
    if not widths or max(widths) <= 0:
        raise ValueError(f"{type(model).__name__} holds no model with a hidden size; set optim.lr_base_width=0")
    return max(widths)


def peak_lr(model: nn.Module, cfg: OptimConfig) -> float:
    """``cfg.lr``, scaled by ``lr_base_width / width`` when ``lr_base_width`` is set."""
    return cfg.lr * cfg.lr_base_width / model_width(model) if cfg.lr_base_width else cfg.lr


def build_optimizer(model: nn.Module, cfg: OptimConfig, max_steps: int):
    """(optimizer, scheduler). Parameters under a ``retriever`` module get ``lr * retriever_lr_scale``; biases and
    LayerNorm weights get no weight decay; shared parameters (shared embedders) appear once. The peak rate is
    ``peak_lr`` (scaled to the model's width when ``lr_base_width`` is set)."""
    lr = peak_lr(model, cfg)
    if lr != cfg.lr:
        logger.info("peak learning rate %.3g (%.3g x %d / width %d)", lr, cfg.lr, cfg.lr_base_width, model_width(model))
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
            "lr": lr * (cfg.retriever_lr_scale if is_retriever else 1.0),
            "weight_decay": cfg.weight_decay if decay else 0.0,
            "retriever": is_retriever,  # note: read by retriever_lr; AdamW keeps a group's extra keys
        }
        for (is_retriever, decay), params in sorted(groups.items())
    ]
    kernel = IMPLEMENTATIONS[cfg.implementation]
    optimizer = torch.optim.AdamW(param_groups, lr=lr, betas=tuple(cfg.betas), eps=cfg.eps, **kernel)
    retriever_warmup = cfg.warmup_steps if cfg.retriever_warmup_steps is None else cfg.retriever_warmup_steps
    schedules = [
        _schedule(cfg, retriever_warmup, max_steps, cfg.retriever_delay_steps)
        if group["retriever"]
        else _schedule(cfg, cfg.warmup_steps, max_steps)
        for group in param_groups
    ]
    return optimizer, LambdaLR(optimizer, schedules)


def _schedule(cfg: OptimConfig, warmup_steps: int, max_steps: int, start: int = 0) -> Callable[[int], float]:
    """One group's LR factor of a step: 0 before ``start``, then ``linear``, a ``wsd`` whose decay starts when the
    warm-up ends (the factor of transformers' ``get_linear_schedule_with_warmup``), or ``wsd``.

    A ``partial``, as transformers' factors are: ``LambdaLR`` saves a factor object's ``__dict__`` and restores it on
    load, which for a partial is empty. So the schedule is always the one the config builds and a checkpoint restores
    only the step count: a run resumed with more ``max_steps`` extends its decay instead of holding the rate at 0."""
    start = min(start, max_steps)
    warmup = min(warmup_steps, max_steps - start)
    decay_start = max_steps - cfg.decay_steps if cfg.schedule == "wsd" else start + warmup
    return functools.partial(
        warmup_stable_decay, warmup, max(decay_start, start + warmup), max(max_steps, 1), start=start
    )


def retriever_lr(optimizer: torch.optim.Optimizer) -> float | None:
    """The embedders' current rate (None when the model has no retriever group)."""
    return next((group["lr"] for group in optimizer.param_groups if group.get("retriever")), None)


def warmup_stable_decay(warmup: int, decay_start: int, max_steps: int, step: int, *, start: int = 0) -> float:
    """LR factor of ``step``: 0 before ``start``, then linear warm-up to 1 over ``warmup`` steps, 1 until
    ``decay_start``, then linear to 0 at ``max_steps``."""
    if step < start:
        return 0.0
    if step < start + warmup:
        return (step - start) / warmup
    if step < decay_start:
        return 1.0
    return max(0.0, (max_steps - step) / max(1, max_steps - decay_start))
