"""The warm start every pipeline begins with: the reader warm-up of the encoder, then ICT for the retriever.

REALM starts its encoder and both retriever towers from one BERT, and ORQA's ICT gives the retriever a start at which
retrieval already helps (otherwise the encoder learns to ignore the documents). A from-scratch encoder first learns to
read in ``realm warmup`` (what BERT's own pre-training gives REALM); a pretrained BERT folder (``init_from``) still
goes through it when it lacks an MLM head (its transform is new), and can skip it otherwise (``warmup_steps: 0``).

On real text a from-scratch encoder does not learn to copy in the reader warm-up (its salient wordpieces are rare), so
the real-text pipeline first runs a copy curriculum (``copy_curriculum``): ``realm warmup`` on copy-only corpora
(``realm.data.copy_corpus``) over a word list that grows, each stage from the previous stage's encoder, the reader
warm-up then starting from the last (``experiments/real_text/RESULTS.md``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from realm.core.checks import Problems
from realm.core.config import load_config
from realm.core.errors import ConfigError
from realm.core.precision import check_precision
from realm.data.blocks import build_blocks_from_config, load_blocks
from realm.data.copy_corpus import frequent_words, write_copy_corpus
from realm.data.corpus import CorpusConfig
from realm.data.vocab import load_tokenizer
from realm.models.bert import ModelConfig
from realm.pipeline import layout
from realm.pipeline.stages import announce_stage
from realm.warmstart.ict_train import ICTConfig, train_ict
from realm.warmstart.warmup import WarmupConfig, train_warmup

logger = logging.getLogger(__name__)

# note: the encoder's shape must be the same in every stage (the warmed-up encoder initialises ICT and pre-training),
# so the pre-training config's shape reaches both warm-start stages; the demo configs' rates are scaled to the width
# (optim.lr_base_width), so the shape is the only thing to change for a larger encoder
SHAPE_KEYS = ("hidden_size", "num_layers", "num_heads", "intermediate_size")


@dataclass(kw_only=True, slots=True)
class CopyStage:
    """One stage of the copy curriculum: ``steps`` of ``realm warmup --task.masking=random_token`` on blocks of
    ``sentences`` sentences of words drawn from the ``words`` most frequent single-wordpiece words of the corpus."""

    words: int
    """0: every single-wordpiece word of the corpus."""
    steps: int
    sentences: int = 1
    """Sentences of 4-6 words a block; several (with a ``block_length`` to hold them) teach finding the query's
    sentence among others at real-text block lengths."""
    block_length: int | None = None
    """Wordpieces a block (None: ``WarmStartConfig.copy_block_length``)."""

    def __post_init__(self) -> None:
        problems = Problems()
        if self.words < 0 or self.steps < 1 or self.sentences < 1:
            problems.add(f"a copy stage needs words >= 0, steps >= 1 and sentences >= 1, got words={self.words} "
                         f"steps={self.steps} sentences={self.sentences}")  # fmt: skip
        problems.raise_if_any()


@dataclass(kw_only=True, slots=True)
class WarmStartConfig:
    """Which warm-start recipes to run and how long."""

    warmup_config: str = "configs/warmup/demo.yaml"
    """The reader warm-up recipe (``realm warmup``)."""
    ict_config: str = "configs/ict/demo.yaml"
    """The ICT recipe (``realm ict``)."""
    warmup_steps: int | None = None
    """Reader warm-up steps (None: the config's; 0 skips the stage)."""
    ict_steps: int | None = None
    """ICT steps (None: the config's)."""
    stage_overrides: dict[str, Any] = field(default_factory=dict)
    """Config sections given to both stages on top of their YAML (e.g. ``retriever`` lengths, ``tagging``)."""
    copy_curriculum: list[CopyStage] = field(default_factory=list)
    """Copy stages run in order before the reader warm-up, for an encoder from scratch (empty: none)."""
    copy_sentences: int = 20000
    """Sentences of each copy corpus (its blocks hold the stage's ``sentences`` each)."""
    copy_query_length: int = 24
    copy_block_length: int = 32
    """Wordpieces of a copy stage's query and (unless the stage names its own) block: a 4-6 word sentence and its
    title, not the pipeline's lengths."""
    precision: str = "auto"
    """``train.precision`` of every warm-start stage (``realm.core.precision``); the pipelines set their own."""
    compile: bool = False
    """``train.compile`` of every warm-start stage (``realm.training.compilation``); the pipelines set their own."""

    def __post_init__(self) -> None:
        problems = Problems()
        problems.check(check_precision, self.precision)
        if self.copy_curriculum and self.warmup_steps == 0:
            problems.add("copy_curriculum needs the reader warm-up after it (warmup_steps is 0)")
        for name in ("warmup_steps", "ict_steps"):
            value = getattr(self, name)
            if value is not None and value < 0:
                problems.add(f"{name} must be >= 0, got {value}")
        if self.ict_steps == 0:
            problems.add("ict_steps must be at least 1 (pre-training needs a retriever to start from)")
        problems.raise_if_any()


@dataclass(frozen=True, slots=True)
class WarmStart:
    """What the warm start published, and what it cost."""

    encoder: Path | None
    """``OUT/warmup/encoder`` (None when the warm-up was skipped)."""
    copied: Path | None
    """The last copy stage's encoder, ``OUT/copy/STAGE/encoder`` (None without a curriculum)."""
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
                 sections: dict[str, Any], precision: str = "auto", compile: bool = False):  # fmt: skip
    """The config of one warm-start stage writing to ``out`` on ``data`` (``tokenizer``, ``blocks``, and optionally
    ``heldout_articles``: ``realm.data.articles.TrainingBlocksInput``)."""
    train = {"run_dir": str(out), "seed": seed, "precision": precision, "compile": compile,
             **({"max_steps": steps} if steps else {})}  # fmt: skip
    return load_config(cls, path, {**sections, "train": train, "data": data})


def copy_curriculum(cfg: WarmStartConfig, out: Path, seed: int, data: dict[str, str], model: dict[str, Any]
                    ) -> Path:  # fmt: skip
    """Runs ``cfg.copy_curriculum`` into ``out/copy/I_words_N/`` (corpus, blocks, warm-up run) and returns the last
    stage's encoder. The words come from the pipeline's own blocks and vocabulary; each stage is seeded by ``seed``."""
    tokenizer = load_tokenizer(data["tokenizer"])
    # every single-wordpiece word ranked once; a stage of N words takes the first N
    ranked = frequent_words(load_blocks(data["blocks"])["text"], tokenizer, 0)
    for i, stage in enumerate(cfg.copy_curriculum):
        if stage.words > len(ranked):
            raise ConfigError(f"copy_curriculum[{i}] asks for {stage.words} words, but the blocks at {data['blocks']} "
                              f"have only {len(ranked)} single-wordpiece words (0 takes them all)")  # fmt: skip
    encoder = None
    for i, stage in enumerate(cfg.copy_curriculum):
        stage_dir = layout.copy_stage_dir(out, i, stage.words)
        block_length = stage.block_length or cfg.copy_block_length
        retriever = {**cfg.stage_overrides.get("retriever", {}), "max_query_length": cfg.copy_query_length,
                     "max_block_length": block_length}  # fmt: skip
        corpus = write_copy_corpus(ranked[: stage.words or None], stage_dir / "corpus.jsonl",
                                   max(1, cfg.copy_sentences // stage.sentences), seed, stage.sentences)  # fmt: skip
        corpus_cfg = CorpusConfig(path=str(corpus), max_block_length=block_length, max_title_length=4)
        blocks = build_blocks_from_config(corpus_cfg, tokenizer, stage_dir / "blocks")
        # note: random wordpieces masked, so that every masked wordpiece is a copy target; the rule tagger because a
        # random-word sentence has no salient span to find (spaCy would only cost time); the learning-rate decay in
        # each stage's last fifth, as in the measured curriculum
        sections = {**cfg.stage_overrides, "retriever": retriever, "tagging": {"kind": "rule"},
                    "task": {"masking": "random_token"}, "optim": {"decay_steps": max(1, stage.steps // 5)},
                    "model": {**model, **({"init_from": str(encoder)} if encoder else {})}}  # fmt: skip
        stage_data = {"tokenizer": data["tokenizer"], "blocks": str(blocks)}
        warmup = stage_config(WarmupConfig, cfg.warmup_config, stage_dir, seed, stage_data, stage.steps, sections,
                              cfg.precision, cfg.compile)  # fmt: skip
        encoder = train_warmup(warmup)
    return encoder


def warm_start(cfg: WarmStartConfig, out: Path, seed: int, data: dict[str, str], model: dict[str, Any]) -> WarmStart:
    """The copy curriculum (if any) into ``out/copy``, the reader warm-up (unless ``cfg.warmup_steps == 0``) into
    ``out/warmup``, then ICT into ``out/ict``.

    ``data`` is the stages' ``data`` section; its ``heldout_articles`` (the pipeline's held-out list) reach the reader
    warm-up and ICT, not the copy stages, whose blocks are random words. ``model`` is the stages' ``model`` section
    (``encoder_shape``). ICT starts from the warmed-up encoder when the encoder started from scratch (measured on the
    demo world: ICT recall@4 0.674 from it, 0.623 from a random BERT), and from the pretrained folder itself
    otherwise, whose encoder weights are what a sentence embedder was trained as. Each stage
    announces itself (``announce_stage``): the copy curriculum when there is one, the reader warm-up, ICT.
    """
    seconds: dict[str, float] = {}
    sections = cfg.stage_overrides
    encoder = copied = None
    if cfg.copy_curriculum:
        if model.get("init_from"):
            raise ValueError("copy_curriculum is for an encoder from scratch; init_from names a pretrained one")
        steps = sum(stage.steps for stage in cfg.copy_curriculum)
        announce_stage("copy curriculum", f"{len(cfg.copy_curriculum)} stages, {steps:,} steps", layout.copy_dir(out))
        t = time.perf_counter()
        copied = copy_curriculum(cfg, out, seed, data, {**sections.get("model", {}), **model})
        seconds["copy_s"] = time.perf_counter() - t
    if cfg.warmup_steps == 0:
        announce_stage("reader warm-up", None)
    else:
        t = time.perf_counter()
        warmup_model = {**sections.get("model", {}), **model, **({"init_from": str(copied)} if copied else {})}
        warmup = stage_config(WarmupConfig, cfg.warmup_config, layout.warmup_dir(out), seed, data, cfg.warmup_steps,
                              {**sections, "model": warmup_model}, cfg.precision, cfg.compile)  # fmt: skip
        announce_stage("reader warm-up", warmup.train.max_steps, layout.warmup_dir(out))
        encoder = train_warmup(warmup)
        seconds["warmup_s"] = time.perf_counter() - t
    ict_model = {**model, "init_from": str(encoder)} if encoder and not model.get("init_from") else model
    # note: ICT never tags (its queries are whole sentences), so the tagging section is the warm-up's alone
    ict_sections = {key: value for key, value in sections.items() if key != "tagging"}
    t = time.perf_counter()
    ict = stage_config(ICTConfig, cfg.ict_config, layout.ict_dir(out), seed, data, cfg.ict_steps,
                       {**ict_sections, "model": {**ict_sections.get("model", {}), **ict_model}},
                       cfg.precision, cfg.compile)  # fmt: skip
    announce_stage("ICT warm start", ict.train.max_steps, layout.ict_dir(out))
    retriever = train_ict(ict)
    seconds["ict_s"] = time.perf_counter() - t
    return WarmStart(encoder, copied, retriever, seconds)
