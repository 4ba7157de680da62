"""``realm warmup``: teach a from-scratch encoder to read, on trivial retrievals of the knowledge corpus.

Output: ``OUT/encoder/``, a ``BertForMaskedLM`` with its tokenizer (published by rename with a manifest), which
pre-training reads through ``train.init_encoder`` (or, as any BERT, ``model.init_from``). Runs that start from a
pretrained BERT skip this stage: BERT's own pre-training taught it to read. See ``realm.reader_warmup``.
"""

from __future__ import annotations

import argparse
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader

from realm.blocks import load_blocks
from realm.config import load_config, save_config
from realm.encoder import KnowledgeAugmentedEncoder
from realm.logging import MetricsLogger, init_logging, progress, set_num_threads
from realm.model import ModelConfig
from realm.packing import SpecialIds
from realm.reader_warmup import TrivialRetrievalCollator, prepare_block_sentences, reader_step
from realm.retrieval import BlockStore
from realm.retriever import RetrieverConfig
from realm.run_dir import replace_published
from realm.tagging import TaggingConfig, build_tagger
from realm.tracking import TrackingConfig
from realm.vocab import load_tokenizer
from trainer.accelerator import build_accelerator
from trainer.data import KeyedExamples, StepBatchSampler
from trainer.optim import OptimConfig, build_optimizer

logger = logging.getLogger(__name__)


@dataclass(kw_only=True, slots=True)
class WarmupTrainConfig:
    out_dir: str = "runs/warmup"
    """Where ``encoder/``, ``metrics.jsonl`` and ``config.yaml`` are written."""
    tokenizer: str = ""
    blocks: str = ""
    """Saved blocks dataset of the knowledge corpus (the only data this stage reads)."""
    max_steps: int = 1000
    batch_size: int = 32
    """Sentences per step, over all processes' micro-batches."""
    seed: int = 0
    log_interval: int = 50
    num_threads: int = 0

    def __post_init__(self) -> None:
        if self.max_steps <= 0 or self.batch_size <= 0 or self.log_interval <= 0:
            raise ValueError("max_steps, batch_size and log_interval must be positive")


@dataclass(kw_only=True, slots=True)
class WarmupConfig:
    warmup: WarmupTrainConfig = field(default_factory=WarmupTrainConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    retriever: RetrieverConfig = field(default_factory=RetrieverConfig)
    """Only ``max_query_length`` and ``max_block_length`` apply: the reader's input is laid out as in pre-training."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    tagging: TaggingConfig = field(default_factory=TaggingConfig)


def train_warmup(cfg: WarmupConfig, accelerator: Accelerator | None = None) -> Path:
    """Runs the reader warm-up and returns the published ``encoder/`` folder."""
    out_dir = Path(cfg.warmup.out_dir)
    accelerator = accelerator or build_accelerator(TrackingConfig(), out_dir)
    set_num_threads(cfg.warmup.num_threads)
    torch.manual_seed(cfg.warmup.seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    if accelerator.is_main_process:
        save_config(cfg, out_dir / "config.yaml")
    tokenizer = load_tokenizer(cfg.warmup.tokenizer)
    special = SpecialIds.of(tokenizer)
    blocks = load_blocks(cfg.warmup.blocks)
    with accelerator.main_process_first():
        rows = prepare_block_sentences(
            blocks, tokenizer, build_tagger(cfg.tagging), cfg.retriever.max_query_length
        )
    encoder = (
        KnowledgeAugmentedEncoder.from_pretrained(cfg.model.init_from)
        if cfg.model.init_from
        else KnowledgeAugmentedEncoder.from_config(cfg.model.bert_config(len(tokenizer)))
    )
    optimizer, scheduler = build_optimizer(encoder, cfg.optim, cfg.warmup.max_steps)
    # note: the scheduler stays unprepared (a prepared one steps once per process per call: N times too fast)
    model, optimizer = accelerator.prepare(encoder, optimizer)
    num_processes = accelerator.num_processes
    if cfg.warmup.batch_size % num_processes:
        raise ValueError(f"warmup.batch_size {cfg.warmup.batch_size} is not divisible by {num_processes} processes")
    sampler = StepBatchSampler(
        len(rows), cfg.warmup.batch_size // num_processes, cfg.warmup.seed, 0, accelerator.process_index,
        num_processes,
    )  # fmt: skip
    collator = TrivialRetrievalCollator(
        special, BlockStore(blocks), cfg.retriever.max_query_length, cfg.retriever.max_block_length, "salient",
        cfg.warmup.seed,
    )  # fmt: skip
    loader = DataLoader(KeyedExamples(rows), batch_sampler=sampler, collate_fn=collator)
    metrics = MetricsLogger(out_dir / "metrics.jsonl" if accelerator.is_main_process else None, accelerator)
    bar = progress(cfg.warmup.max_steps, "reader warm-up", unit="step", enabled=accelerator.is_main_process)
    t0, step, window = time.perf_counter(), 0, []
    for batch in loader:
        if step >= cfg.warmup.max_steps:
            break
        loss, step_metrics = reader_step(model, batch.to(accelerator.device))
        accelerator.backward(loss)
        if cfg.optim.max_grad_norm > 0:
            accelerator.clip_grad_norm_(model.parameters(), cfg.optim.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        bar.update(1)
        window.append({"warmup/loss": loss.detach(), **{f"warmup/{k}": v for k, v in step_metrics.items()}})
        if step % cfg.warmup.log_interval == 0 or step == cfg.warmup.max_steps:
            means = {k: torch.stack([w[k] for w in window]).mean() for k in window[0]}
            plain = metrics.log({**means, "time/elapsed_s": time.perf_counter() - t0}, step)
            logger.info(
                "warm-up step %d loss %.4f span accuracy %.3f",
                step,
                plain["warmup/loss"],
                plain["warmup/span_accuracy"],
            )
            window = []
    bar.close()
    metrics.close()
    if collator.num_rejected:
        logger.info("warm-up: %d block sentences had no salient span to mask (skipped)", collator.num_rejected)
    final = out_dir / "encoder"

    def save(staging: Path) -> None:
        accelerator.unwrap_model(model).save_pretrained(staging)
        tokenizer.save_pretrained(str(staging))

    if accelerator.is_main_process:
        replace_published(final, save, {"kind": "reader_warmup_encoder", "steps": step})
    accelerator.wait_for_everyone()
    return final


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="realm warmup", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    args, overrides = parser.parse_known_args(argv)
    init_logging()
    cfg = load_config(WarmupConfig, args.config, overrides)
    print(train_warmup(cfg))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
