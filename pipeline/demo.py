"""The demo's pipeline on the synthetic world embedded in the code, on CPU, with no downloads.

world -> WordPiece vocabulary -> blocks -> reader warm-up of the from-scratch encoder (``realm warmup``: what BERT's
own pre-training gives REALM) -> ICT warm start of the retriever -> pre-training (trainer + live index builder as a
child process) -> held-out evaluation with retrieval and closed book -> open-domain QA fine-tuning on questions about
training entities, evaluated on questions about held-out ones. Writes ``OUT/summary.json``. ``realm demo`` builds a
``DemoConfig`` from its dotted keys and calls ``run_demo``; ``bench/evidence.py`` starts every row where the demo starts
(``make_data`` and ``warm_start_demo``).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from realm.core.config import load_config, to_dict
from realm.core.precision import check_precision
from realm.core.tracking import TrackingConfig
from realm.finetune.train import FinetuneConfig
from realm.models.bert import ModelConfig
from realm.pipeline.stages import (StageBanners, announce_stage, finetune_and_evaluate, pipeline_tracking,
                                   pretrain_and_evaluate, write_summary)
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
    pretrain_overrides: list[str] = field(default_factory=list)
    """Dotted overrides of the pre-training config (``--section.key=value``), after the demo's own; ``realm demo``
    puts every ``--train.*``, ``--optim.*``, ``--tracking.*``, ... of its command line here."""
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
    """Whether the reader warm-up and ICT read the held-out entities' articles too (their corpus sentences, never
    their X sentences or questions), as REALM's own pre-training reads all of Wikipedia; false excludes them
    (``world/heldout_articles.txt``), as ``realm real-text`` always does. Measured on the CI-sized demo, seed 0
    (docs/evidence.md, "What the held-out figure rests on"): excluding them takes held-out accuracy from 0.545 to
    0.067 and recall@4 after ICT from 0.988 to 0.776; the warm-up's reading is what carries it (0.473 with only the
    warm-up reading them, 0.188 with only ICT). So the from-scratch reader does not copy from articles it never read,
    and the default keeps the recipe the demo's figures were measured with."""

    def __post_init__(self) -> None:
        check_precision(self.precision)


def make_data(cfg: DemoConfig) -> dict[str, Path]:
    """The world, its vocabulary and its blocks under ``OUT`` (``realm.pipeline.synthetic.make_world_data``), the blocks
    cut for the pre-training retriever, the one that embeds them for the index."""
    shape = load_config(PretrainConfig, cfg.pretrain_config, cfg.pretrain_overrides).retriever
    return make_world_data(Path(cfg.out), cfg.seed, cfg.num_entities, cfg.vocab_size, shape.max_block_length)


def pretrain_config(cfg: DemoConfig, paths: dict[str, Path]) -> PretrainConfig:
    """The pre-training config: the YAML, this run's paths and warm starts, the step override, then
    ``pretrain_overrides``."""
    run = Path(cfg.out)
    warmed = [f"--train.init_encoder={run / 'warmup' / 'encoder'}"] if cfg.warm_start.warmup_steps != 0 else []
    return load_config(
        PretrainConfig,
        cfg.pretrain_config,
        [
            f"--train.run_dir={run}",
            f"--train.seed={cfg.seed}",
            f"--train.precision={cfg.precision}",
            f"--train.compile={str(cfg.compile).lower()}",
            f"--train.init_retriever={run / 'ict' / 'retriever'}",
            *warmed,
            f"--data.tokenizer={paths['tokenizer']}",
            f"--data.blocks={paths['blocks']}",
            f"--data.sentences={paths['pretrain']}",
            f"--data.heldout={paths['heldout']}",
            *([f"--train.max_steps={cfg.pretrain_steps}"] if cfg.pretrain_steps else []),
            *cfg.pretrain_overrides,
        ],
    )


def warm_start_demo(cfg: DemoConfig, paths: dict[str, Path], model: ModelConfig,
                    tracking: TrackingConfig | None = None) -> WarmStart:
    """The reader warm-up and ICT on the demo's data (less the held-out entities' articles unless
    ``cfg.warm_start_reads_heldout``), in the shape of the pre-training encoder ``model``."""
    names = ("tokenizer", "blocks") + (() if cfg.warm_start_reads_heldout else ("heldout_articles",))
    data = {name: str(paths[name]) for name in names}
    sections = {**cfg.warm_start.stage_overrides, "tracking": to_dict(pipeline_tracking(tracking, cfg.out))}
    warm = dataclasses.replace(cfg.warm_start, precision=cfg.precision, compile=cfg.compile, stage_overrides=sections)
    return warm_start(warm, Path(cfg.out), cfg.seed, data, encoder_shape(model))


def finetune_config(cfg: DemoConfig, paths: dict[str, Path], tracking: TrackingConfig | None = None) -> FinetuneConfig:
    """QA fine-tuning of the pre-trained run on questions about training entities, evaluated on held-out ones."""
    run = Path(cfg.out)
    overrides = {
        "train": {"run_dir": str(run / "qa"), "seed": cfg.seed, "num_threads": cfg.num_threads,
                  "precision": cfg.precision, "compile": cfg.compile,
                  **({"max_steps": cfg.qa_steps} if cfg.qa_steps else {})},
        "task": {"train": str(paths["questions_train"]), "dev": str(paths["questions_heldout"]),
                 "max_dev_questions": cfg.max_dev_questions},
        "init": {"run": str(run)},
        "tracking": to_dict(pipeline_tracking(tracking, cfg.out)),
    }  # fmt: skip
    return load_config(FinetuneConfig, cfg.finetune_config, overrides)


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

    t = time.perf_counter()
    announce_stage("data", f"a world of {cfg.num_entities:,} entities, a WordPiece vocabulary, blocks", run)
    paths = make_data(cfg)
    stages["data_s"] = time.perf_counter() - t
    pretrain = pretrain_config(cfg, paths)
    pretrain.tracking = pipeline_tracking(pretrain.tracking, cfg.out)
    cfg = dataclasses.replace(cfg, compile=pretrain.train.compile)  # note: a --train.compile reaches every stage
    stages |= warm_start_demo(cfg, paths, pretrain.model, pretrain.tracking).seconds

    pretrained = pretrain_and_evaluate(pretrain)
    stages |= pretrained.seconds
    start, end, train = pretrained.start, pretrained.end, pretrained.train

    t = time.perf_counter()
    qa = finetune_and_evaluate(finetune_config(cfg, paths, pretrain.tracking)) if cfg.qa_steps != 0 else None
    if qa is None:
        announce_stage("QA fine-tuning", None)
    stages["qa_s"] = time.perf_counter() - t
    summary = {
        "heldout_accuracy_retrieval": end.span_accuracy,
        "heldout_accuracy_closed_book": end.closed_book_span_accuracy,
        "heldout_token_accuracy_retrieval": end.token_accuracy,
        "heldout_token_accuracy_closed_book": end.closed_book_token_accuracy,
        "gold_recall_at_k_start": start.gold_recall_at_k,
        "gold_recall_at_k_end": end.gold_recall_at_k,
        "gold_recall_at_1_start": start.gold_recall_at_1,
        "gold_recall_at_1_end": end.gold_recall_at_1,
        "k": end.k,
        "num_heldout_examples": end.num_examples,
        "num_index_refreshes": train["num_index_refreshes"],
        "trainer_wait_fraction": train["trainer_wait_fraction"],
        "pretrain_steps": train["step"],
        **(qa or {}),
        "wall_seconds": time.perf_counter() - t_start,
        "stage_seconds": stages,
        "definitions": DEFINITIONS,
    }
    write_summary(run, summary, pretrain.tracking)
    return summary
