"""``realm ict``: warm-start the embedders with the Inverse Cloze Task and write retriever weights.

    realm ict --config configs/ict/demo.yaml [--train.run_dir=OUT --data.blocks=... --train.max_steps=N ...]

Output: ``OUT/retriever/`` (``Retriever.save_pretrained`` layout, published by rename with a manifest), which
pre-training reads through ``train.init_retriever``. Checkpoints in ``OUT/checkpoints/`` let a stopped run resume
exactly (``train.resume``), as every training job does (``realm.training.scaffold``).
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Collection

import datasets
import numpy as np
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, Dataset

from realm.core.checks import Problems
from realm.core.config import config_from_command_line, to_dict
from realm.core.errors import run_command
from realm.core.logging import eta, init_logging
from realm.core.tracking import TrackingConfig, init_trackers
from realm.data.articles import TrainingBlocksInput, heldout_blocks
from realm.data.blocks import check_blocks_tokenizer, load_blocks
from realm.data.packing import SpecialIds
from realm.models.bert import ModelConfig
from realm.models.pretrained import load_model_tokenizer
from realm.models.retriever import Retriever, RetrieverConfig
from realm.pretrain.ict import ICTCollator, LazyICTExamples, block_sentences, ict_loss
from realm.training.accelerator import build_accelerator
from realm.training.lineage import end_job_tracking
from realm.training.optim import OptimConfig
from realm.training.preemption import Preemption, stop_if_preempted
from realm.training.sampler import KeyedExamples, StepBatchSampler
from realm.training.scaffold import LoopConfig, TrainingLoop, iterate, start_job

logger = logging.getLogger(__name__)

RETRIEVER_DIR = "retriever"
"""Where an ICT run publishes its retriever, inside its ``train.run_dir``: what ``--train.init_retriever`` names."""


@dataclass(kw_only=True, slots=True)
class ICTLoopConfig(LoopConfig):
    run_dir: str = "runs/ict"
    max_steps: int = 10_000
    batch_size: int = 64
    """Queries per step; the other blocks of the batch are the negatives."""

    MIN_STEPS: ClassVar[int] = 1  # a job that takes no step has nothing to publish

    def __post_init__(self) -> None:
        problems = Problems()
        if self.batch_size < 2:
            problems.add(f"batch_size must be >= 2 (in-batch negatives), got {self.batch_size}")
        problems.check(LoopConfig.__post_init__, self)
        problems.raise_if_any()


@dataclass(kw_only=True, slots=True)
class ICTTaskConfig:
    remove_prob: float = 0.9
    """Probability that the query sentence is removed from its block (ORQA: 0.9)."""
    query_mask_prob: float = 0.0
    """Probability that a run of the query's wordpieces is [MASK]ed, as in REALM's queries (0: ORQA's sentences)."""
    query_mask_max_span: int = 4
    """The longest such run, in wordpieces."""
    prepare: str = "eager"
    """``eager``: every training block split and tokenised before the first step, in every process, and cached with
    the blocks (``ict_examples``; fine up to ~1M blocks: ~1,700 blocks/s a core, ~1 KB of cache a block); ``lazy``:
    each block when its batch is drawn (``realm.pretrain.ict.LazyICTExamples``; nothing up front, the full-scale
    setting)."""
    loader_workers: int = 0
    """DataLoader worker processes that make the batches (``lazy``: the splitting and tokenising moves off the step)."""

    def __post_init__(self) -> None:
        problems = Problems()
        for name in ("remove_prob", "query_mask_prob"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                problems.add(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.prepare not in ("eager", "lazy"):
            problems.add(f"prepare must be 'eager' or 'lazy', got {self.prepare!r}")
        if self.loader_workers < 0:
            problems.add(f"loader_workers must be >= 0, got {self.loader_workers}")
        if self.query_mask_max_span < 1:
            problems.add(f"query_mask_max_span must be >= 1, got {self.query_mask_max_span}")
        problems.raise_if_any()


@dataclass(kw_only=True, slots=True)
class ICTConfig:
    train: ICTLoopConfig = field(default_factory=ICTLoopConfig)
    data: TrainingBlocksInput = field(default_factory=TrainingBlocksInput)
    ict: ICTTaskConfig = field(default_factory=ICTTaskConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    retriever: RetrieverConfig = field(default_factory=RetrieverConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    """Where the ICT's metrics and its published output go (W&B/TensorBoard; ``metrics.jsonl`` always)."""


def ict_examples(blocks: datasets.Dataset, tokenizer, heldout: np.ndarray | None = None,
                 excluded: Collection[str] = frozenset()) -> datasets.Dataset:  # fmt: skip
    """Blocks split into tokenised sentences (less the ``excluded`` ones, ``block_sentences``), but for the
    ``heldout`` ones ([N] bool, ``realm.data.articles.heldout_blocks``); blocks with fewer than two sentences cannot
    pose a cloze and are dropped (the count is logged)."""
    if heldout is not None:
        blocks = blocks.select(np.flatnonzero(~heldout))

    def split(batch: dict) -> dict:
        sentences = [block_sentences(text, excluded) for text in batch["text"]]
        flat = [s for group in sentences for s in group]
        ids = tokenizer(flat, add_special_tokens=False)["input_ids"] if flat else []
        out, i = [], 0
        for group in sentences:
            out.append(ids[i : i + len(group)])
            i += len(group)
        return {"sentence_ids": out}

    rows = blocks.map(split, batched=True, remove_columns=[c for c in blocks.column_names if c != "title_ids"])
    kept = rows.filter(lambda r: len(r["sentence_ids"]) >= 2)
    if len(kept) < len(rows):
        logger.warning(
            "ICT: %d of %d blocks have fewer than 2 sentences and are not used", len(rows) - len(kept), len(rows)
        )
    return kept


def train_ict(cfg: ICTConfig, accelerator: Accelerator | None = None) -> Path:
    """Runs (or resumes) ICT and returns the published ``retriever/`` folder."""
    accelerator = accelerator or build_accelerator(cfg.tracking, cfg.train.run_dir, cfg.train.precision)
    out_dir = start_job(cfg.train, accelerator, cfg)
    init_trackers(accelerator, cfg.tracking, out_dir, to_dict(cfg), job_type="ict")
    tokenizer = load_model_tokenizer(cfg.data.tokenizer, cfg.model.init_from)
    check_blocks_tokenizer(cfg.data.blocks, tokenizer)
    special = SpecialIds.of(tokenizer)
    corpus = load_blocks(cfg.data.blocks)
    heldout = heldout_blocks(corpus, cfg.data.heldout_articles, "ICT")
    if cfg.ict.prepare == "lazy":
        examples: Dataset = LazyICTExamples(corpus, tokenizer, heldout, cfg.data.excluded_sentences())
    else:
        examples = KeyedExamples(ict_examples(corpus, tokenizer, heldout, cfg.data.excluded_sentences()))
    bert_config = cfg.model.bert_config(len(tokenizer))
    retriever = (
        Retriever.from_bert(cfg.model.init_from, cfg.retriever)
        if cfg.model.init_from
        else Retriever.from_config(bert_config, cfg.retriever)
    )
    longest = max(cfg.retriever.max_query_length, cfg.retriever.max_block_length)
    loop = TrainingLoop.prepare(accelerator, cfg.train, cfg.optim, retriever, cfg, longest)
    model = loop.model
    loop.resume()
    sampler = StepBatchSampler(
        len(examples), cfg.train.batch_size, cfg.train.seed, loop.step, accelerator.process_index,
        accelerator.num_processes,
    )  # fmt: skip
    collator = ICTCollator(
        special, cfg.retriever.max_query_length, cfg.retriever.max_block_length, cfg.ict.remove_prob, cfg.train.seed,
        cfg.ict.query_mask_prob, cfg.ict.query_mask_max_span,
    )  # fmt: skip
    batches = iterate(DataLoader(examples, batch_sampler=sampler, collate_fn=collator,
                                 num_workers=cfg.ict.loader_workers))  # fmt: skip
    unwrapped: Retriever = accelerator.unwrap_model(model)
    t0, first = time.perf_counter(), loop.step
    with Preemption() as preemption:  # note: a SIGTERM or SIGUSR1 ends the job at a step boundary, checkpointed
        while not loop.done:
            batch = next(batches).to(accelerator.device)
            query, block = model(batch.query_input_ids, batch.query_attention_mask, batch.block_input_ids,
                                 batch.block_attention_mask, batch.block_token_type_ids)  # fmt: skip
            blocks, offset = _global_blocks(accelerator, block)
            loss, accuracy = ict_loss(query, blocks, offset, scale=unwrapped.query_embedder.score_scale)
            accelerator.backward(loss)
            loop.window.add({"loss": loss, "accuracy": accuracy})
            loop.optimizer_step()
            plain = loop.end_step("ict", {"time/elapsed_s": time.perf_counter() - t0})
            if plain:
                logger.info("ICT step %d/%d loss %.4f in-batch acc %.3f %s", loop.step, cfg.train.max_steps,
                            plain["ict/loss"], plain["ict/accuracy"], eta(loop.step, cfg.train.max_steps, (t0, first)))
            stop_if_preempted(preemption, loop, "ict")
    loop.close()
    published = loop.publish(out_dir / RETRIEVER_DIR, unwrapped.save_pretrained, {"kind": "ict_retriever"})
    end_job_tracking(accelerator, published, loop.step)
    return published


def _global_blocks(accelerator: Accelerator, block: torch.Tensor) -> tuple[torch.Tensor, int]:
    """All processes' blocks as negatives; gradients flow only into this process's own rows."""
    if accelerator.num_processes == 1:
        return block, 0
    gathered = accelerator.gather(block.detach())
    rank, size = accelerator.process_index, block.shape[0]
    return torch.cat([gathered[: rank * size], block, gathered[(rank + 1) * size :]]), rank * size


def main(argv: list[str] | None = None) -> int:
    cfg = config_from_command_line(ICTConfig, argv, "realm ict", __doc__.splitlines()[0])
    init_logging()
    print(train_ict(cfg))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_command("realm ict", main, sys.argv[1:]))
