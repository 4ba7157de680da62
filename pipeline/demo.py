"""The demo's pipeline on the synthetic world embedded in the code, on CPU, with no downloads.

world -> WordPiece vocabulary -> blocks -> reader warm-up of the from-scratch encoder (``realm warmup``: what BERT's own
pre-training gives REALM) -> ICT warm start of the retriever -> pre-training (trainer + live index builder as a child
process) -> held-out evaluation with retrieval and closed book -> open-domain QA fine-tuning on questions about training
entities, evaluated on questions about held-out ones. Writes ``OUT/summary.json``. ``realm demo`` builds a
``DemoConfig`` from its dotted keys and calls ``run_demo``; ``experiments/demo/evidence.py`` starts every row where the
demo starts (``make_data`` and ``warm_start_demo``).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from realm.core.config import merge_sections
from realm.core.precision import check_precision
from realm.core.tracking import TrackingConfig
from realm.finetune.train import FinetuneConfig
from realm.models.bert import ModelConfig
from realm.pipeline.builders import finetune_config as build_finetune_config
from realm.pipeline.builders import load_pretrain, pretrain_train, warm_start_recipe, with_data
from realm.pipeline.stages import (StageBanners, announce_stage, finetune_and_evaluate, finish_summary,
                                   pipeline_tracking, pretrain_and_evaluate, pretrain_figures)
from realm.pipeline.synthetic import make_world_data
from realm.pipeline.warm_start import WarmStart, WarmStartConfig, encoder_shape, warm_start
from realm.pretrain.config import PretrainConfig

DEFINITIONS = {
    "heldout_accuracy_*": "share of held-out sentences whose masked fact span is predicted exactly "
    "(every wordpiece), argmax of the marginal p(y|x) or of p(y|null, x)",
    "gold_recall_at_k": "share of held-out sentences whose entity's article is among the k retrieved blocks",
    "qa_exact_match_*": "exact match on questions about held-out entities, before / after fine-tuning the "
    "pre-trained model on questions about training entities (realm finetune)",
}
"""What the summary's figures mean, written into it."""


@dataclass(kw_only=True, slots=True)
class DemoConfig:
    """The whole demo: the world, its vocabulary, each stage's recipe and length (``realm demo``'s dotted keys)."""

    out: str = "runs/demo"
    """The run directory."""
    seed: int = 0
    """Seed of the world, of every stage's initialisation and of its data order."""
    num_entities: int = 2000
    """Entities in the generated world."""
    vocab_size: int = 12000
    """WordPiece entries (the default is large enough for every generated name to be one)."""
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    """The reader warm-up and ICT recipes (``configs/{warmup,ict}/demo.yaml``) and their step overrides."""
    pretrain_config: str = "configs/pretrain/demo.yaml"
    """The pre-training recipe (a packaged name or a file; ``configs/pretrain/demo_gpu.yaml`` for one GPU)."""
    pretrain_steps: int | None = None
    """None (or 0): the config's."""
    pretrain_overrides: dict[str, Any] = field(default_factory=dict)
    """Config sections put over the pre-training YAML after the demo's own (e.g. ``{"model": {"num_layers": 3}}``),
    which they win over; ``realm demo`` puts every ``--train.*``, ``--optim.*``, ``--tracking.*``, ... of its command
    line here, key by key (``realm.core.config.config_from_command_line``'s passthrough)."""
    finetune_config: str = "configs/finetune/demo.yaml"
    """The QA fine-tuning recipe."""
    qa_steps: int | None = None
    """QA fine-tuning steps (None: the config's; 0 skips QA)."""
    max_dev_questions: int = 500
    """Evaluate QA on the first N held-out questions (0: all)."""
    num_threads: int = 0
    """Threads of QA fine-tuning (0: torch's default); ``realm demo`` also sets its own process's."""
    precision: str = "auto"
    """``train.precision`` of every stage (``realm.core.precision``): warm-up, ICT, pre-training and its child
    builder, evaluation, QA."""
    compile: bool = False
    """``train.compile`` of every training stage (``realm.training.compilation``): warm-up, ICT, pre-training, QA;
    ``--train.compile=true`` on the command line does the same."""
    warm_start_reads_heldout: bool = True
    """Whether the reader warm-up and ICT read the held-out entities' articles too (their corpus sentences, never their
    X sentences or questions), as REALM's own pre-training reads all of Wikipedia; false excludes them
    (``world/heldout_articles.txt``), as ``realm real-text`` always does. Measured on the CI-sized demo, seed 0
    (experiments/demo/log/2026-11-25-evidence.md, "What the held-out figure rests on"): excluding them takes held-out
    accuracy from 0.545 to 0.067 and recall@4 after ICT from 0.988 to 0.776; the warm-up's reading is what carries it
    (0.473 with only the warm-up reading them, 0.188 with only ICT). So the from-scratch reader does not copy from
    articles it never read, and the default keeps the recipe the demo's figures were measured with."""

    def __post_init__(self) -> None:
        check_precision(self.precision)


def pretrain_base(cfg: DemoConfig) -> PretrainConfig:
    """The pre-training config before the data exists, loaded once a run: the YAML, this run's folders and warm
    starts, the step override, then ``pretrain_overrides`` (which win over all of these)."""
    own = {"train": {**pretrain_train(cfg, warmed=cfg.warm_start.warmup_steps != 0), "compile": cfg.compile}}
    return load_pretrain(cfg, merge_sections(own, cfg.pretrain_overrides, "pretrain_overrides"))


def make_data(cfg: DemoConfig, pretrain: PretrainConfig | None = None) -> dict[str, Path]:
    """The world, its vocabulary and its blocks under ``OUT`` (``realm.pipeline.synthetic.make_world_data``), the blocks
    cut for the pre-training retriever (``pretrain``, default ``pretrain_base(cfg)``), the one that embeds them."""
    shape = (pretrain or pretrain_base(cfg)).retriever
    return make_world_data(Path(cfg.out), cfg.seed, cfg.num_entities, cfg.vocab_size, shape.max_block_length)


def pretrain_config(cfg: DemoConfig, paths: dict[str, Path], pretrain: PretrainConfig | None = None
                    ) -> PretrainConfig:  # fmt: skip
    """The pre-training config (``pretrain``, default ``pretrain_base(cfg)``) reading the world ``paths``, except
    where ``pretrain_overrides`` name a data file of their own."""
    data = {"tokenizer": paths["tokenizer"], "blocks": paths["blocks"], "sentences": paths["pretrain"],
            "heldout": paths["heldout"]}  # fmt: skip
    given = cfg.pretrain_overrides.get("data", {})
    return with_data(pretrain or pretrain_base(cfg), {k: str(v) for k, v in data.items() if k not in given})


def warm_start_demo(cfg: DemoConfig, paths: dict[str, Path], model: ModelConfig,
                    tracking: TrackingConfig | None = None) -> WarmStart:
    """The reader warm-up and ICT on the demo's data (less the held-out entities' articles unless
    ``cfg.warm_start_reads_heldout``), in the shape of the pre-training encoder ``model``."""
    names = ("tokenizer", "blocks") + (() if cfg.warm_start_reads_heldout else ("heldout_articles",))
    data = {name: str(paths[name]) for name in names}
    warm = warm_start_recipe(cfg, pipeline_tracking(tracking, cfg.out))
    return warm_start(warm, Path(cfg.out), cfg.seed, data, encoder_shape(model))


def finetune_config(cfg: DemoConfig, paths: dict[str, Path], tracking: TrackingConfig | None = None) -> FinetuneConfig:
    """QA fine-tuning of the pre-trained run on questions about training entities, evaluated on held-out ones."""
    task = {"train": str(paths["questions_train"]), "dev": str(paths["questions_heldout"]),
            "max_dev_questions": cfg.max_dev_questions}  # fmt: skip
    return build_finetune_config(cfg, task, train={"num_threads": cfg.num_threads},
                                 tracking=pipeline_tracking(tracking, cfg.out))  # fmt: skip


def run_demo(cfg: DemoConfig) -> dict[str, Any]:
    """Runs every stage and returns (and writes to ``OUT/summary.json``) the figures and the seconds of each; each
    stage logs a numbered line (``[3/5] ICT warm start: 1,000 steps -> runs/demo/ict``)."""
    with StageBanners(5):
        return _run_stages(cfg)


def _run_stages(cfg: DemoConfig) -> dict[str, Any]:
    t_start = time.perf_counter()
    run = Path(cfg.out)
    run.mkdir(parents=True, exist_ok=True)
    stages: dict[str, float] = {}
    # note: loaded before the data, whose blocks are cut for its retriever
    pretrain = pretrain_base(cfg)

    t = time.perf_counter()
    announce_stage("data", f"a world of {cfg.num_entities:,} entities, a WordPiece vocabulary, blocks", run)
    paths = make_data(cfg, pretrain)
    stages["data_s"] = time.perf_counter() - t
    pretrain = pretrain_config(cfg, paths, pretrain)
    cfg = dataclasses.replace(cfg, compile=pretrain.train.compile)  # note: a --train.compile reaches every stage
    stages |= warm_start_demo(cfg, paths, pretrain.model, pretrain.tracking).seconds

    pretrained = pretrain_and_evaluate(pretrain)
    stages |= pretrained.seconds

    t = time.perf_counter()
    qa = finetune_and_evaluate(finetune_config(cfg, paths, pretrain.tracking)) if cfg.qa_steps != 0 else None
    if qa is None:
        announce_stage("QA fine-tuning", None)
    stages["qa_s"] = time.perf_counter() - t
    summary = {**pretrain_figures(pretrained, recall=True), **(qa or {})}
    tail = {"stage_seconds": stages, "definitions": DEFINITIONS}
    return finish_summary(run, summary, t_start, pretrain.tracking, tail)
