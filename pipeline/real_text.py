"""The real-text pipeline, the twin of the demo on files the user names: a corpus (e.g. Wikipedia lead sections), QA
questions to fine-tune on and QA questions to evaluate on.

corpus -> vocabulary (WordPiece trained on the corpus, or the pretrained folder's own) -> blocks -> cloze sets (X:
the training articles' sentences; held out: sentences of held-out articles with one salient span each, tagged by
spaCy by default) -> warm start (copy curriculum from scratch, reader warm-up and ICT, both skipping the held-out
articles) -> REALM pre-training with the asynchronous index builder -> held-out span accuracy with retrieval and
closed book -> QA fine-tuning -> exact match on the dev questions.
Writes ``OUT/summary.json``. ``realm real-text`` and ``experiments/real_text/real_open_qa.py`` call ``run_real_text``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from realm.core.checks import Problems
from realm.core.config import merge_sections
from realm.core.errors import ConfigError
from realm.core.precision import check_precision
from realm.core.tracking import TrackingConfig
from realm.data.blocks import build_blocks_from_config, load_blocks
from realm.data.articles import article_keys
from realm.data.cloze_sets import ClozeSets, choose_heldout_articles, write_cloze_sets
from realm.data.corpus import CorpusConfig, read_documents
from realm.data.tagging import TaggingConfig, build_tagger
from realm.data.vocab import train_wordpiece
from realm.finetune.train import FinetuneConfig
from realm.models.pretrained import model_tokenizer
from realm.models.retriever import RETRIEVER_SHAPE_DEFAULTS
from realm.pipeline import layout
from realm.pipeline.builders import finetune_config as build_finetune_config
from realm.pipeline.builders import load_pretrain, pretrain_train, warm_start_recipe, with_data
from realm.pipeline.stages import (StageBanners, announce_stage, finetune_and_evaluate, finish_summary,
                                   pretrain_and_evaluate, pretrain_figures)
from realm.pipeline.warm_start import WarmStartConfig, encoder_shape, warm_start
from realm.pretrain.config import PretrainConfig

logger = logging.getLogger(__name__)

STAGES = ("data", "warm_start", "pretrain", "qa")

RETRIEVER_SHAPE = (*RETRIEVER_SHAPE_DEFAULTS, "init_projection", "max_query_length", "max_block_length")
"""What the warm-start stages take from the pre-training config's retriever, so their retriever is the one it loads."""


@dataclass(kw_only=True, slots=True)
class QAFiles:
    """The questions to fine-tune on and to evaluate on (formats: ``realm.finetune.task.TaskConfig.name``)."""

    train_task: str = "dpr"
    train: str = ""
    dev_task: str = "nq"
    dev: str = ""
    max_dev_questions: int = 500
    """Evaluate on the first N dev questions (0: all)."""


@dataclass(kw_only=True, slots=True)
class RealTextConfig:
    """The whole pipeline: files, split, vocabulary, tagger, and each stage's recipe and length."""

    out: str = "runs/real_text"
    seed: int = 0
    corpus: CorpusConfig = field(default_factory=lambda: CorpusConfig(format="json_object", text_field="extract"))
    """The knowledge corpus; its ``max_block_length`` is replaced by the pre-training retriever's."""
    qa: QAFiles = field(default_factory=QAFiles)
    heldout_docs: int = 300
    """Articles (``realm.data.articles``: the blocks sharing a title) whose sentences no training stage reads, neither
    the warm start nor pre-training, and are the held-out cloze set."""
    max_heldout_sentences: int = 1000
    """A seeded sample of the held-out articles' sentences (0: all)."""
    heldout_sentences: str = ""
    """A file of sentences, one a line (``experiments/real_text/reachable_cloze.py``'s ``heldout_sentences.txt``: the
    reachable cloze items), that no stage trains on: not a warm-up example, an ICT query or pseudo-document, nor a
    sentence of X. Their blocks stay in the corpus."""
    vocab_size: int = 16000
    """WordPiece entries when the encoder starts from scratch (``init_from`` brings its own vocabulary)."""
    init_from: str | None = None
    """A local BERT folder (e.g. all-MiniLM-L6-v2's) to start the encoder and both towers from, with its vocabulary."""
    tagging: TaggingConfig = field(default_factory=lambda: TaggingConfig(kind="spacy"))
    """Salient spans at REALM's definition (named entities and dates): spaCy's NER by default on real text."""
    warm_start: WarmStartConfig = field(default_factory=lambda: WarmStartConfig(
        warmup_config="configs/real_text/warmup/default.yaml",
        ict_config="configs/real_text/ict/default.yaml"))  # fmt: skip
    pretrain_config: str = "configs/real_text/pretrain/default.yaml"
    pretrain_steps: int | None = None
    """None: the config's."""
    finetune_config: str = "configs/real_text/finetune/default.yaml"
    qa_steps: int | None = None
    """None: the config's; 0 skips QA."""
    pretrain_overrides: dict[str, Any] = field(default_factory=dict)
    """Config sections put over the pre-training YAML (e.g. ``{"model": {"num_layers": 4}}``); ``realm real-text``
    puts every ``--train.*``, ``--optim.*``, ``--tracking.*``, ... of its command line here. Its ``tracking`` section
    reaches every stage (warm starts, pre-training, QA), whose W&B runs form one group with the pipeline's summary."""
    precision: str = "auto"
    """``train.precision`` of every stage (``realm.core.precision``): warm-up, ICT, pre-training and its child
    builder, evaluation, QA."""
    compile: bool = False
    """``train.compile`` of every training stage (``realm.training.compilation``): warm-up, ICT, pre-training, QA;
    ``--train.compile=true`` on the command line does the same."""
    stop_after: str = "qa"
    """``data`` stops after the vocabulary, blocks and cloze sets (to run the stages on GPUs with ``launch/``),
    ``warm_start`` after ICT, ``pretrain`` after pre-training and its evaluation, ``qa`` runs everything."""

    def __post_init__(self) -> None:
        problems = Problems()
        problems.check(check_precision, self.precision)
        if self.heldout_docs < 1:
            problems.add(f"heldout_docs must be at least 1, got {self.heldout_docs}")
        if self.stop_after not in STAGES:
            problems.add(f"stop_after must be one of {STAGES}, got {self.stop_after!r}")
        problems.raise_if_any()


def prepare_data(cfg: RealTextConfig, max_block_length: int) -> tuple[dict[str, str], ClozeSets, dict[str, Any]]:
    """Vocabulary, blocks and cloze sets under ``OUT``; returns the stages' ``data`` paths, the cloze sets and
    counts for the summary."""
    out = Path(cfg.out)
    corpus = dataclasses.replace(cfg.corpus, max_block_length=max_block_length)
    if cfg.init_from:
        tokenizer, tokenizer_path = model_tokenizer(cfg.init_from), cfg.init_from
    else:
        texts = (f"{doc.title}\n{doc.text}" for doc in read_documents(corpus))
        tokenizer_path = str(layout.tokenizer_dir(out))
        tokenizer = train_wordpiece(texts, cfg.vocab_size, tokenizer_path)
    blocks_dir = build_blocks_from_config(corpus, tokenizer, layout.blocks_dir(out))
    blocks = load_blocks(blocks_dir)
    doc_ids = set(blocks["doc_id"])
    heldout = choose_heldout_articles(article_keys(blocks), cfg.heldout_docs, cfg.seed)
    sets = write_cloze_sets(blocks, layout.cloze_dir(out), heldout, build_tagger(cfg.tagging), cfg.seed,
                            cfg.max_heldout_sentences)  # fmt: skip
    counts = {"num_blocks": len(blocks), "num_documents": len(doc_ids), "vocab_size": len(tokenizer),
              **{k: v for k, v in dataclasses.asdict(sets).items() if k.startswith("num_")}}  # fmt: skip
    return {"tokenizer": tokenizer_path, "blocks": str(blocks_dir)}, sets, counts


def pretrain_base(cfg: RealTextConfig, warmed: bool) -> PretrainConfig:
    """The pre-training config before the data exists, loaded once a run: the YAML, then ``pretrain_overrides``, then
    this run's folders, warm starts (the warm-up's encoder when ``warmed``), tagger and length; a ``train.compile``
    of ``pretrain_overrides`` wins over ``cfg.compile``."""
    own = {"train": pretrain_train(cfg, warmed),
           "data": {"tagging": dataclasses.asdict(cfg.tagging),
                    **({"heldout_sentences": cfg.heldout_sentences} if cfg.heldout_sentences else {})},
           **({"model": {"init_from": cfg.init_from}} if cfg.init_from else {})}  # fmt: skip
    user = merge_sections({"train": {"compile": cfg.compile}}, cfg.pretrain_overrides, "pretrain_overrides")
    return load_pretrain(cfg, merge_sections(user, own, "pretrain_overrides"))


def pretrain_config(cfg: RealTextConfig, data: dict[str, str], sets: ClozeSets, warmed: bool,
                    pretrain: PretrainConfig | None = None) -> PretrainConfig:  # fmt: skip
    """The pre-training config (``pretrain``, default ``pretrain_base(cfg, warmed)``) reading ``data``'s vocabulary
    and blocks and the cloze sets ``sets``."""
    paths = {**data, "sentences": str(sets.pretrain), "heldout": str(sets.heldout)}
    return with_data(pretrain or pretrain_base(cfg, warmed), paths)


def run_real_text(cfg: RealTextConfig) -> dict[str, Any]:
    """Runs every stage and returns (and writes to ``OUT/summary.json``) the figures and the seconds of each; each
    stage logs a numbered line (``[4/6] ICT warm start: 500 steps -> runs/real_text/ict``)."""
    # note: the stages up to stop_after: data, the copy curriculum (when there is one), warm-up, ICT, pre-training, QA
    total = {"data": 1, "warm_start": 3, "pretrain": 4, "qa": 5}[cfg.stop_after]
    total += bool(cfg.warm_start.copy_curriculum) and cfg.stop_after != "data"
    with StageBanners(total):
        return _run_stages(cfg)


def _run_stages(cfg: RealTextConfig) -> dict[str, Any]:
    if not cfg.corpus.path:
        raise ConfigError("corpus.path must name the knowledge corpus")
    if cfg.qa_steps != 0 and cfg.stop_after == "qa" and not (cfg.qa.train and cfg.qa.dev):
        raise ConfigError("qa.train and qa.dev must name question files (or qa_steps: 0 stops after pre-training)")
    t_start = time.perf_counter()
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    # note: loaded before the data, whose blocks are cut for its retriever, the one that embeds them for the index
    pretrain = pretrain_base(cfg, warmed=cfg.warm_start.warmup_steps != 0)
    tracking = pretrain.tracking
    t = time.perf_counter()
    vocabulary = f"the vocabulary of {cfg.init_from}" if cfg.init_from else "a WordPiece vocabulary"
    announce_stage("data", f"{vocabulary}, blocks, cloze sets from {cfg.corpus.path}", out)
    data, sets, counts = prepare_data(cfg, pretrain.retriever.max_block_length)
    seconds["data_s"] = time.perf_counter() - t
    summary: dict[str, Any] = {**counts, "stage_seconds": seconds}
    if cfg.stop_after == "data":
        return finish_summary(out, summary, t_start, tracking)

    pretrain = pretrain_config(cfg, data, sets, cfg.warm_start.warmup_steps != 0, pretrain)
    cfg = dataclasses.replace(cfg, compile=pretrain.train.compile)  # note: a --train.compile reaches every stage
    retriever = {key: getattr(pretrain.retriever, key) for key in RETRIEVER_SHAPE}
    warm = warm_start_recipe(cfg, tracking, {"retriever": retriever, "tagging": dataclasses.asdict(cfg.tagging)})
    warm_data = {**data, "heldout_articles": str(sets.heldout_articles),
                 **({"heldout_sentences": cfg.heldout_sentences} if cfg.heldout_sentences else {})}  # fmt: skip
    seconds |= warm_start(warm, out, cfg.seed, warm_data, encoder_shape(pretrain.model)).seconds
    if cfg.stop_after == "warm_start":
        return finish_summary(out, summary, t_start, tracking)

    pretrained = pretrain_and_evaluate(pretrain)
    seconds |= pretrained.seconds
    qa = None
    if cfg.qa_steps != 0 and cfg.stop_after == "qa":
        t = time.perf_counter()
        qa = finetune_and_evaluate(finetune_config(cfg, tracking=tracking))
        seconds["qa_s"] = time.perf_counter() - t
    elif cfg.stop_after == "qa":
        announce_stage("QA fine-tuning", None)
    summary |= {**pretrain_figures(pretrained, start_accuracy=True), **(qa or {})}
    return finish_summary(out, summary, t_start, tracking)


def finetune_config(cfg: RealTextConfig, run_dir: Path | None = None, start: dict[str, Any] | None = None,
                    tracking: TrackingConfig | None = None) -> FinetuneConfig:  # fmt: skip
    """QA fine-tuning on ``cfg``'s questions (``realm.pipeline.builders.finetune_config``: written to ``run_dir``,
    default ``OUT/qa``, starting as ``start`` says, default the pre-trained run in ``OUT``, reporting to ``tracking``,
    default the fine-tuning config's own)."""
    task = {"name": cfg.qa.train_task, "train": cfg.qa.train, "dev_name": cfg.qa.dev_task, "dev": cfg.qa.dev,
            "max_dev_questions": cfg.qa.max_dev_questions}  # fmt: skip
    return build_finetune_config(cfg, task, run_dir=run_dir, start=start, tracking=tracking)
