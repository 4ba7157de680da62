"""``realm ict``: warm-start the embedders with the Inverse Cloze Task and write retriever weights.

Output: ``OUT/retriever/`` (``Retriever.save_pretrained`` layout, published by rename with a manifest), which
pre-training reads through ``train.init_retriever``.
"""

from __future__ import annotations

import argparse
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader

from realm.blocks import load_blocks
from realm.config import load_config, save_config
from realm.ict import ICTCollator, ict_loss
from realm.logging import MetricsLogger, init_logging, set_num_threads
from realm.model import ModelConfig
from realm.packing import SpecialIds
from realm.retriever import Retriever, RetrieverConfig
from realm.run_dir import replace_published
from realm.sentences import split_sentences
from realm.tracking import TrackingConfig
from realm.vocab import load_tokenizer
from trainer.accelerator import build_accelerator
from trainer.data import KeyedExamples, StepBatchSampler
from trainer.optim import OptimConfig, build_optimizer

logger = logging.getLogger(__name__)


@dataclass(kw_only=True, slots=True)
class ICTTrainConfig:
    out_dir: str = "runs/ict"
    """Where ``retriever/``, ``metrics.jsonl`` and ``config.yaml`` are written."""
    tokenizer: str = ""
    blocks: str = ""
    """Saved blocks dataset of the knowledge corpus."""
    max_steps: int = 10_000
    batch_size: int = 64
    """Queries per step; the other blocks of the batch are the negatives."""
    remove_prob: float = 0.9
    """Probability that the query sentence is removed from its block (ORQA: 0.9)."""
    seed: int = 0
    log_interval: int = 20
    num_threads: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.remove_prob <= 1.0:
            raise ValueError(f"remove_prob must be in [0, 1], got {self.remove_prob}")
        if self.max_steps <= 0 or self.batch_size < 2:
            raise ValueError("max_steps must be positive and batch_size >= 2 (in-batch negatives)")


@dataclass(kw_only=True, slots=True)
class ICTConfig:
    ict: ICTTrainConfig = field(default_factory=ICTTrainConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    retriever: RetrieverConfig = field(default_factory=RetrieverConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)


def ict_examples(blocks: datasets.Dataset, tokenizer) -> datasets.Dataset:
    """Blocks split into tokenised sentences; blocks with fewer than two sentences cannot pose a cloze and are
    dropped (the count is logged)."""

    def split(batch: dict) -> dict:
        sentences = [[text[a:b] for a, b in split_sentences(text)] for text in batch["text"]]
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
    """Runs ICT and returns the published ``retriever/`` folder."""
    accelerator = accelerator or build_accelerator(TrackingConfig(), cfg.ict.out_dir)
    set_num_threads(cfg.ict.num_threads)
    torch.manual_seed(cfg.ict.seed)
    out_dir = Path(cfg.ict.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_config(cfg, out_dir / "config.yaml")
    tokenizer = load_tokenizer(cfg.ict.tokenizer)
    special = SpecialIds.of(tokenizer)
    rows = ict_examples(load_blocks(cfg.ict.blocks), tokenizer)
    bert_config = cfg.model.bert_config(len(tokenizer))
    retriever = (
        Retriever.from_bert(cfg.model.init_from, cfg.retriever)
        if cfg.model.init_from
        else Retriever.from_config(bert_config, cfg.retriever)
    )
    optimizer, scheduler = build_optimizer(retriever, cfg.optim, cfg.ict.max_steps)
    # note: the scheduler stays unprepared (a prepared one steps once per process per call: N times too fast)
    model, optimizer = accelerator.prepare(retriever, optimizer)
    sampler = StepBatchSampler(
        len(rows), cfg.ict.batch_size, cfg.ict.seed, 0, accelerator.process_index, accelerator.num_processes
    )
    collator = ICTCollator(
        special, cfg.retriever.max_query_length, cfg.retriever.max_block_length, cfg.ict.remove_prob, cfg.ict.seed
    )
    loader = DataLoader(KeyedExamples(rows), batch_sampler=sampler, collate_fn=collator)
    metrics = MetricsLogger(out_dir / "metrics.jsonl" if accelerator.is_main_process else None, accelerator)
    unwrapped: Retriever = accelerator.unwrap_model(model)
    t0, step = time.perf_counter(), 0
    for batch in loader:
        if step >= cfg.ict.max_steps:
            break
        batch = batch.to(accelerator.device)
        query, block = model(
            batch.query_input_ids,
            batch.query_attention_mask,
            batch.block_input_ids,
            batch.block_attention_mask,
            batch.block_token_type_ids,
        )
        blocks, offset = _global_blocks(accelerator, block)
        loss, accuracy = ict_loss(query, blocks, offset, scale=unwrapped.query_embedder.score_scale)
        accelerator.backward(loss)
        if cfg.optim.max_grad_norm > 0:
            accelerator.clip_grad_norm_(model.parameters(), cfg.optim.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        if step % cfg.ict.log_interval == 0 or step == cfg.ict.max_steps:
            plain = metrics.log(
                {"ict/loss": loss.detach(), "ict/accuracy": accuracy, "time/elapsed_s": time.perf_counter() - t0}, step
            )
            logger.info("ICT step %d loss %.4f in-batch acc %.3f", step, plain["ict/loss"], plain["ict/accuracy"])
    metrics.close()
    final = out_dir / "retriever"
    if accelerator.is_main_process:
        replace_published(final, unwrapped.save_pretrained, {"kind": "ict_retriever", "steps": step})
    accelerator.wait_for_everyone()
    return final


def _global_blocks(accelerator: Accelerator, block: torch.Tensor) -> tuple[torch.Tensor, int]:
    """All processes' blocks as negatives; gradients flow only into this process's own rows."""
    if accelerator.num_processes == 1:
        return block, 0
    gathered = accelerator.gather(block.detach())
    rank, size = accelerator.process_index, block.shape[0]
    return torch.cat([gathered[: rank * size], block, gathered[(rank + 1) * size :]]), rank * size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="realm ict", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    args, overrides = parser.parse_known_args(argv)
    init_logging()
    cfg = load_config(ICTConfig, args.config, overrides)
    print(train_ict(cfg))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
