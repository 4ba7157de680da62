"""The memoriser the memorisation studies share (the demo's, FEVER's): a closed-book reader warm-up trained chunk by
chunk until it reproduces what it memorises, its encoder read back from each chunk's checkpoint, and the table and
verdict lines of its rows."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

from realm.core.config import load_config
from realm.models.bert import ModelConfig
from realm.models.encoder import KnowledgeAugmentedEncoder
from realm.pretrain.saved_run import MODEL_FILE
from realm.run.layout import CHECKPOINT_PREFIX, checkpoints_dir
from realm.run.publication import folder_name
from realm.training.checkpoint import load_weights
from realm.warmstart.warmup import WarmupConfig, train_warmup


def memoriser_config(run: Path, *, recipe: Path, shape: ModelConfig, tokenizer: str, blocks: str, sentences: str,
                     init_from: str, seed: int, max_steps: int, stop_at: int, chunk: int) -> WarmupConfig:  # fmt: skip
    """A closed-book reader warm-up (``recipe``'s optimiser) of an encoder of ``shape`` from ``init_from`` on the
    gold spans of ``sentences``, stopping at ``stop_at`` of a ``max_steps`` schedule."""
    overrides = {
        "train": {"run_dir": str(run), "seed": seed, "max_steps": max_steps, "stop_at_step": stop_at,
                  "save_interval": chunk, "keep_checkpoints": 1},
        "data": {"tokenizer": tokenizer, "blocks": blocks},
        "task": {"closed_book": True, "sentences": sentences},
        "model": {"init_from": init_from, "hidden_size": shape.hidden_size, "num_layers": shape.num_layers,
                  "num_heads": shape.num_heads, "intermediate_size": shape.intermediate_size},
    }  # fmt: skip
    return load_config(WarmupConfig, recipe, overrides)


def checkpoint_encoder(run: Path, step: int, init_from: str | Path) -> KnowledgeAugmentedEncoder:
    """The memoriser's encoder in its checkpoint of ``step`` (the run stops at each chunk; nothing is published)."""
    encoder = KnowledgeAugmentedEncoder.from_pretrained(str(init_from))  # the shape; every weight is overwritten
    weights = checkpoints_dir(run) / folder_name(CHECKPOINT_PREFIX, step) / MODEL_FILE
    return load_weights(encoder, weights).eval()


def memorise(run: Path, config_at: Callable[[int], WarmupConfig], probe: Callable[[KnowledgeAugmentedEncoder], dict],
             init_from: str | Path, *, chunk: int, max_steps: int, target: float, target_key: str,
             min_seconds: float = 0.0) -> list[dict]:  # fmt: skip
    """Trains the memoriser (``config_at(stop)``: its config stopping at ``stop``) chunk by chunk until the probe's
    ``target_key`` reaches ``target`` and it has trained ``min_seconds``, or ``max_steps``; returns one record per
    chunk (step, cumulative training seconds, the probe's figures)."""
    curve, seconds = [], 0.0
    for stop in range(chunk, max_steps + 1, chunk):
        t0 = time.perf_counter()
        train_warmup(config_at(stop))
        seconds += time.perf_counter() - t0
        figures = probe(checkpoint_encoder(run, stop, init_from))
        curve.append({"step": stop, "train_s": seconds, **figures})
        print(json.dumps({"memoriser": curve[-1]}), flush=True)
        if figures[target_key] >= target and seconds >= min_seconds:
            break
    return curve


def table_lines(table: dict, columns: tuple[tuple[str, str], ...]) -> list[str]:
    """A markdown table of the rows (steps, training seconds where a row has them, then ``columns``)."""
    lines = [
        "| row | steps | train s | " + " | ".join(title for _, title in columns) + " |",
        "|---|---|---|" + "---|" * len(columns),
    ]
    for name, row in table.items():
        steps = row.get("steps", row.get("step", ""))
        seconds = row.get("train_s", row.get("wall_s"))
        cells = [f"{row[key]:.3f}" if key in row else "" for key, _ in columns]
        seconds = "" if seconds is None else f"{seconds:.0f}"
        lines.append(f"| {name} | {steps} | {seconds} | " + " | ".join(cells) + " |")
    return lines


def verdict(table: dict, key: str, what: str, target: float) -> str:
    """Where the ``memoriser@N`` rows first reach ``target`` on ``key``, or how far the last one got."""
    memorised = [r for n, r in table.items() if n.startswith("memoriser@")]
    hit = next((r for r in memorised if r[key] >= target), None)
    if hit:
        return f"memoriser: {what} {target:.2f} reached at step {hit['step']} ({hit['train_s']:.0f} s)"
    return f"memoriser: {what} {target:.2f} not reached ({memorised[-1][key]:.3f} at the last chunk)"
