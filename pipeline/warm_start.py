"""The warm start every pipeline begins with: the reader warm-up of the encoder, then ICT for the retriever.

REALM starts its encoder and both retriever towers from one BERT, and ORQA's ICT gives the retriever a start at which
retrieval already helps (otherwise the encoder learns to ignore the documents). A from-scratch encoder first learns to
read in ``realm warmup`` (what BERT's own pre-training gives REALM); a pretrained BERT folder (``init_from``) still
goes through it when it lacks an MLM head (its transform is new), and can skip it otherwise (``warmup_steps: 0``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from realm.core.config import load_config
from realm.models.bert import ModelConfig
from warmstart.ict import ICTConfig, train_ict
from warmstart.reader import WarmupConfig, train_warmup

logger = logging.getLogger(__name__)

# note: the encoder's shape must be the same in every stage (the warmed-up encoder initialises ICT and pre-training),
# so the pre-training config's shape reaches both warm-start stages; the demo configs' rates are scaled to the width
# (optim.lr_base_width), so the shape is the only thing to change for a larger encoder
SHAPE_KEYS = ("hidden_size", "num_layers", "num_heads", "intermediate_size")


@dataclass(kw_only=True, slots=True)
class WarmStartConfig:
    """Which warm-start recipes to run and how long."""

    warmup_config: str = "configs/warmup/demo.yaml"
    ict_config: str = "configs/ict/demo.yaml"
    warmup_steps: int | None = None
    """Reader warm-up steps (None: the config's; 0 skips the stage)."""
    ict_steps: int | None = None
    """ICT steps (None: the config's)."""
    stage_overrides: dict[str, Any] = field(default_factory=dict)
    """Config sections given to both stages on top of their YAML (e.g. ``retriever`` lengths, ``tagging``)."""

    def __post_init__(self) -> None:
        for name in ("warmup_steps", "ict_steps"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        if self.ict_steps == 0:
            raise ValueError("ict_steps must be at least 1 (pre-training needs a retriever to start from)")


@dataclass(frozen=True, slots=True)
class WarmStart:
    """What the warm start published, and what it cost."""

    encoder: Path | None
    """``OUT/warmup/encoder`` (None when the warm-up was skipped)."""
    retriever: Path
    """``OUT/ict/retriever``."""
    seconds: dict[str, float]


def encoder_shape(model: ModelConfig) -> dict[str, Any]:
    """The shape keys of the pre-training encoder, as the ``model`` section of a warm-start stage's config; with
    ``init_from`` the pretrained folder is the shape."""
    if model.init_from:
        return {"init_from": model.init_from}
    return {key: getattr(model, key) for key in SHAPE_KEYS}


def stage_config(cls: type, path: str, out: Path, seed: int, data: dict[str, str], steps: int | None,
                 sections: dict[str, Any]):  # fmt: skip
    """The config of one warm-start stage writing to ``out`` on ``data`` (``tokenizer``, ``blocks``)."""
    train = {"run_dir": str(out), "seed": seed, **({"max_steps": steps} if steps else {})}
    return load_config(cls, path, {**sections, "train": train, "data": data})


def warm_start(cfg: WarmStartConfig, out: Path, seed: int, data: dict[str, str], model: dict[str, Any]) -> WarmStart:
    """Reader warm-up (unless ``cfg.warmup_steps == 0``) into ``out/warmup``, then ICT into ``out/ict``.

    ``model`` is the stages' ``model`` section (``encoder_shape``). ICT starts from the warmed-up encoder when the
    encoder started from scratch (measured on the demo world: ICT recall@4 0.674 from it, 0.623 from a random BERT),
    and from the pretrained folder itself otherwise, whose encoder weights are what a sentence embedder was trained as.
    """
    seconds: dict[str, float] = {}
    sections = cfg.stage_overrides
    encoder = None
    if cfg.warmup_steps != 0:
        t = time.perf_counter()
        warmup = stage_config(WarmupConfig, cfg.warmup_config, out / "warmup", seed, data, cfg.warmup_steps,
                              {**sections, "model": {**sections.get("model", {}), **model}})  # fmt: skip
        encoder = train_warmup(warmup)
        seconds["warmup_s"] = time.perf_counter() - t
    ict_model = {**model, "init_from": str(encoder)} if encoder and not model.get("init_from") else model
    # note: ICT never tags (its queries are whole sentences), so the tagging section is the warm-up's alone
    ict_sections = {key: value for key, value in sections.items() if key != "tagging"}
    t = time.perf_counter()
    ict = stage_config(ICTConfig, cfg.ict_config, out / "ict", seed, data, cfg.ict_steps,
                       {**ict_sections, "model": {**ict_sections.get("model", {}), **ict_model}})  # fmt: skip
    retriever = train_ict(ict)
    seconds["ict_s"] = time.perf_counter() - t
    return WarmStart(encoder, retriever, seconds)
