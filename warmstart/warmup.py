"""``realm warmup``: teach a from-scratch encoder to read, on trivial retrievals of the knowledge corpus.

    realm warmup --config configs/warmup/demo.yaml [--train.run_dir=OUT --data.blocks=... --train.max_steps=N ...]

Output: ``OUT/encoder/``, a ``BertForMaskedLM`` with its tokenizer (published by rename with a manifest), which
pre-training reads through ``train.init_encoder`` (or, as any BERT, ``model.init_from``). Runs that start from a
pretrained BERT skip this stage: BERT's own pre-training taught it to read. See ``realm.pretrain.reader_warmup``.
Checkpoints in ``OUT/checkpoints/`` let a stopped run resume exactly (``train.resume``).
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from accelerate import Accelerator
from torch.utils.data import DataLoader

from realm.core.checks import Problems
from realm.core.config import config_from_command_line, to_dict
from realm.core.errors import ConfigError, run_command
from realm.core.logging import eta, init_logging, progress
from realm.core.tracking import TrackingConfig, init_trackers
from realm.data.articles import TrainingBlocksInput, heldout_blocks
from realm.data.block_store import BlockStore
from realm.data.blocks import check_blocks_tokenizer, load_blocks
from realm.data.packing import SpecialIds
from realm.data.tagging import TaggingConfig, build_tagger
from realm.models.bert import ModelConfig
from realm.models.encoder import KnowledgeAugmentedEncoder
from realm.models.pretrained import load_model_tokenizer
from realm.models.retriever import RetrieverConfig
from realm.pretrain.data import prepared_sentences
from realm.pretrain.reader_warmup import (
    TrivialRetrievalCollator,
    prepare_block_sentences,
    reader_step,
    skip_unsampled,
)
from realm.training.accelerator import build_accelerator
from realm.training.lineage import end_job_tracking
from realm.training.optim import OptimConfig
from realm.training.preemption import Preemption, stop_if_preempted
from realm.training.sampler import KeyedExamples, StepBatchSampler
from realm.training.scaffold import LoopConfig, TrainingLoop, iterate, start_job

logger = logging.getLogger(__name__)

ENCODER_DIR = "encoder"
"""Where a warm-up run publishes its encoder, inside its ``train.run_dir``: what ``realm train --train.init_encoder``
and ICT start from."""


@dataclass(kw_only=True, slots=True)
class WarmupLoopConfig(LoopConfig):
    run_dir: str = "runs/warmup"
    log_interval: int = 50
    batch_size: int = 32
    """Sentences per step, over all processes' micro-batches."""

    MIN_STEPS: ClassVar[int] = 1  # a job that takes no step has nothing to publish

    def __post_init__(self) -> None:
        LoopConfig.__post_init__(self)


@dataclass(kw_only=True, slots=True)
class WarmupTask:
    """What the encoder reads. The default is the reader warm-up: block sentences read against their own block. With
    ``closed_book`` it reads the null document instead: closed-book MLM, the memorising model of the memorisation
    question (``experiments/demo/memorisation.py``), on the blocks' sentences or on a ``sentences`` file."""

    closed_book: bool = False
    sentences: str = ""
    """With ``closed_book``: a sentences jsonl (``text`` with the ``answer_start``/``answer_end`` span to mask, the X
    format) to train on instead of the blocks' own sentences; the gold span is what is masked (the fact, not any
    salient span such as the entity's name)."""
    masking: str = "salient"
    """What is masked in a block's sentence: ``salient`` (one named entity or date, as in pre-training) or
    ``random_token`` (each wordpiece with probability 0.15): several copy targets a sentence instead of one, a denser
    signal for the copying skill where one span a sentence is too sparse for it to appear (real text)."""
    max_blocks: int = 0
    """Read the sentences of a seeded sample of this many training blocks only (0: every block). The main process
    splits and tags them before the other processes start, behind a barrier, so this bounds that wait (and the
    prepared rows) by config instead of by the corpus: spaCy tags ~1,450 sentences/s, ~10 sentences a 288-wordpiece
    block."""

    def __post_init__(self) -> None:
        problems = Problems()
        if self.sentences and not self.closed_book:
            problems.add("task.sentences needs task.closed_book=true (a sentence of a file has no own block)")
        if self.masking not in ("salient", "random_token"):
            problems.add(f"task.masking must be 'salient' or 'random_token', got {self.masking!r}")
        if self.max_blocks < 0:
            problems.add(f"task.max_blocks must be >= 0 (0: every block), got {self.max_blocks}")
        if self.sentences and self.masking != "salient":
            problems.add("task.sentences masks each sentence's gold span; task.masking does not apply")
        problems.raise_if_any()


@dataclass(kw_only=True, slots=True)
class WarmupConfig:
    train: WarmupLoopConfig = field(default_factory=WarmupLoopConfig)
    data: TrainingBlocksInput = field(default_factory=TrainingBlocksInput)
    """The knowledge corpus blocks (and, with ``task.sentences``, the tokenizer only), less its held-out articles."""
    task: WarmupTask = field(default_factory=WarmupTask)
    model: ModelConfig = field(default_factory=ModelConfig)
    retriever: RetrieverConfig = field(default_factory=RetrieverConfig)
    """Only ``max_query_length`` and ``max_block_length`` apply: the reader's input is laid out as in pre-training."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    """Where the reader warm-up's metrics and its published output go (W&B/TensorBoard; ``metrics.jsonl`` always)."""
    tagging: TaggingConfig = field(default_factory=TaggingConfig)


def train_warmup(cfg: WarmupConfig, accelerator: Accelerator | None = None) -> Path:
    """Runs (or resumes) the reader warm-up and returns the published ``encoder/`` folder."""
    accelerator = accelerator or build_accelerator(cfg.tracking, cfg.train.run_dir, cfg.train.precision)
    out_dir = start_job(cfg.train, accelerator, cfg)
    init_trackers(accelerator, cfg.tracking, out_dir, to_dict(cfg), job_type="warmup")
    num_processes = accelerator.num_processes
    if cfg.train.batch_size % num_processes:
        raise ConfigError(f"train.batch_size {cfg.train.batch_size} is not divisible by {num_processes} processes")
    tokenizer = load_model_tokenizer(cfg.data.tokenizer, cfg.model.init_from)
    check_blocks_tokenizer(cfg.data.blocks, tokenizer)
    special = SpecialIds.of(tokenizer)
    blocks = load_blocks(cfg.data.blocks)
    with accelerator.main_process_first():
        if cfg.task.sentences:
            cache = out_dir / "data"
            rows = prepared_sentences(cfg.task.sentences, tokenizer, None, cfg.retriever.max_query_length, cache)
        else:
            heldout = skip_unsampled(heldout_blocks(blocks, cfg.data.heldout_articles, "reader warm-up"), len(blocks),
                                     cfg.task.max_blocks, cfg.train.seed)  # fmt: skip
            rows = prepare_block_sentences(blocks, tokenizer, build_tagger(cfg.tagging), cfg.retriever.max_query_length,
                                           heldout, cfg.data.excluded_sentences())  # fmt: skip
    encoder = (
        KnowledgeAugmentedEncoder.from_pretrained(cfg.model.init_from)
        if cfg.model.init_from
        else KnowledgeAugmentedEncoder.from_config(cfg.model.bert_config(len(tokenizer)))
    )
    loop = TrainingLoop.prepare(accelerator, cfg.train, cfg.optim, encoder, cfg, cfg.retriever.max_reader_length)
    model = loop.model
    loop.resume()
    sampler = StepBatchSampler(
        len(rows), cfg.train.batch_size // num_processes, cfg.train.seed, loop.step, accelerator.process_index,
        num_processes,
    )  # fmt: skip
    store = None if cfg.task.closed_book else BlockStore(blocks)
    mode = "gold" if cfg.task.sentences else cfg.task.masking
    collator = TrivialRetrievalCollator(
        special, store, cfg.retriever.max_query_length, cfg.retriever.max_block_length, mode, cfg.train.seed
    )
    batches = iterate(DataLoader(KeyedExamples(rows), batch_sampler=sampler, collate_fn=collator))
    bar = progress(cfg.train.last_step, "reader warm-up", unit="step", initial=loop.step,
                   enabled=accelerator.is_main_process)  # fmt: skip
    t0, first = time.perf_counter(), loop.step
    with Preemption() as preemption:  # note: a SIGTERM or SIGUSR1 ends the job at a step boundary, checkpointed
        while not loop.done:
            batch = next(batches).to(accelerator.device)
            loss, step_metrics = reader_step(model, batch)
            accelerator.backward(loss)
            loop.window.add({"loss": loss, **step_metrics})
            loop.optimizer_step()
            bar.update(1)
            plain = loop.end_step("warmup", {"time/elapsed_s": time.perf_counter() - t0})
            if plain:
                logger.info("warm-up step %d/%d loss %.4f span accuracy %.3f %s", loop.step, cfg.train.max_steps,
                            plain["warmup/loss"], plain["warmup/span_accuracy"],
                            eta(loop.step, cfg.train.max_steps, (t0, first)))  # fmt: skip
            stop_if_preempted(preemption, loop, "warmup")
    bar.close()
    loop.close()
    if collator.num_rejected:
        logger.info("warm-up: %d block sentences had no salient span to mask (skipped)", collator.num_rejected)

    def save(folder: Path) -> None:
        accelerator.unwrap_model(model).save_pretrained(folder)
        tokenizer.save_pretrained(str(folder))

    published = loop.publish(out_dir / ENCODER_DIR, save, {"kind": "reader_warmup_encoder"})
    end_job_tracking(accelerator, published, loop.step)
    return published


def main(argv: list[str] | None = None) -> int:
    cfg = config_from_command_line(WarmupConfig, argv, "realm warmup", __doc__.splitlines()[0])
    init_logging()
    print(train_warmup(cfg))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_command("realm warmup", main, sys.argv[1:]))
