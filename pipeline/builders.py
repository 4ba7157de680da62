"""The stage configs both pipelines build alike (``realm.pipeline.demo``, ``realm.pipeline.real_text``), from the
settings they share: the output folder, seed, precision, compile, and each stage's recipe and length.

Each pipeline passes in only what is its own (its data paths, its QA task, the sections its warm start adds). The
pre-training config is loaded once a run (``load_pretrain``), before the data stage that cuts blocks for its
retriever, and given the data's paths with ``dataclasses.replace`` (``with_data``) once they exist.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from realm.core.config import load_config, to_dict
from realm.core.tracking import TrackingConfig
from realm.finetune.train import FinetuneConfig
from realm.pipeline import layout
from realm.pipeline.stages import pipeline_tracking
from realm.pipeline.warm_start import WarmStartConfig
from realm.pretrain.config import PretrainConfig


class PipelineSettings(Protocol):
    """What every pipeline config (``DemoConfig``, ``RealTextConfig``) has, and the builders read."""

    out: str
    seed: int
    precision: str
    compile: bool
    warm_start: WarmStartConfig
    pretrain_config: str
    pretrain_steps: int | None
    pretrain_overrides: dict[str, Any]
    finetune_config: str
    qa_steps: int | None


def pretrain_train(cfg: PipelineSettings, warmed: bool) -> dict[str, Any]:
    """The pre-training ``train`` keys every pipeline sets: its run directory, seed and precision, the warm starts
    it begins from (ICT's retriever; the warm-up's encoder when ``warmed``) and its length (``pretrain_steps``)."""
    return {"run_dir": str(layout.pretrain_run(cfg.out)), "seed": cfg.seed, "precision": cfg.precision,
            "init_retriever": str(layout.ict_retriever(cfg.out)),
            **({"init_encoder": str(layout.warmup_encoder(cfg.out))} if warmed else {}),
            **({"max_steps": cfg.pretrain_steps} if cfg.pretrain_steps else {})}  # fmt: skip


def load_pretrain(cfg: PipelineSettings, sections: dict[str, Any]) -> PretrainConfig:
    """The pipeline's pre-training config, its one ``load_config``: the recipe with ``sections`` over it, and its
    ``tracking`` as every stage of the pipeline takes it (``pipeline_tracking``)."""
    pretrain = load_config(PretrainConfig, cfg.pretrain_config, sections)
    return dataclasses.replace(pretrain, tracking=pipeline_tracking(pretrain.tracking, cfg.out))


def with_data(pretrain: PretrainConfig, data: dict[str, str]) -> PretrainConfig:
    """``pretrain`` reading what the data stage wrote (``data`` section keys: ``tokenizer``, ``blocks``,
    ``sentences``, ``heldout``)."""
    return dataclasses.replace(pretrain, data=dataclasses.replace(pretrain.data, **data))


def warm_start_recipe(cfg: PipelineSettings, tracking: TrackingConfig, sections: dict[str, Any] | None = None
                      ) -> WarmStartConfig:  # fmt: skip
    """The pipeline's warm start: its recipe with ``sections`` and the pipeline's ``tracking`` over its stage
    overrides, at the pipeline's precision and compile."""
    stage = {**cfg.warm_start.stage_overrides, **(sections or {}), "tracking": to_dict(tracking)}
    return dataclasses.replace(cfg.warm_start, stage_overrides=stage, precision=cfg.precision, compile=cfg.compile)


def finetune_config(cfg: PipelineSettings, task: dict[str, Any], *, train: dict[str, Any] | None = None,
                    run_dir: str | None = None, start: dict[str, Any] | None = None,
                    tracking: TrackingConfig | None = None) -> FinetuneConfig:  # fmt: skip
    """QA fine-tuning on ``task`` (the ``task`` section), written to ``run_dir`` (default ``OUT/qa``), starting as
    ``start`` says (config sections such as ``init`` and ``data``; default the pre-trained run in ``OUT``, its index
    frozen), reporting to ``tracking`` (default the fine-tuning config's own); ``train`` adds pipeline keys."""
    train = {"run_dir": str(run_dir or layout.qa_run(cfg.out)), "seed": cfg.seed, "precision": cfg.precision,
             "compile": cfg.compile, **(train or {}),
             **({"max_steps": cfg.qa_steps} if cfg.qa_steps else {})}  # fmt: skip
    sections = {"train": train, "task": task, **(start or {"init": {"run": str(layout.pretrain_run(cfg.out))}})}
    return load_config(FinetuneConfig, cfg.finetune_config,
                       sections | ({"tracking": to_dict(tracking)} if tracking else {}))  # fmt: skip
