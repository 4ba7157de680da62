"""A tiny generated world (64 entities), its vocabulary and blocks, shared by the end-to-end tests."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from realm.blocks import build_blocks_from_config
from realm.corpus import CorpusConfig
from realm.jsonl import iter_field
from realm.vocab import train_wordpiece
from realm.world import WorldConfig, generate_world, write_world

ROOT = Path(__file__).resolve().parents[2]


def make_world(out: Path, seed: int, num_entities: int, vocab_size: int, max_block_length: int) -> dict[str, Path]:
    """A generated world with its WordPiece vocabulary and blocks under ``out``; returns every path by name."""
    paths = write_world(generate_world(WorldConfig(seed=seed, num_entities=num_entities)), out / "world")
    tokenizer = train_wordpiece(iter_field([paths["corpus"], paths["pretrain"]], "text"), vocab_size, out / "tokenizer")
    corpus = CorpusConfig(path=str(paths["corpus"]), max_block_length=max_block_length)
    build_blocks_from_config(corpus, tokenizer, out / "blocks")
    return {**paths, "tokenizer": out / "tokenizer", "blocks": out / "blocks"}


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory) -> dict[str, Path]:
    return make_world(
        tmp_path_factory.mktemp("tiny_world"), seed=3, num_entities=64, vocab_size=2000, max_block_length=48
    )


def data_overrides(world: dict[str, Path]) -> list[str]:
    return [
        f"--data.tokenizer={world['tokenizer']}",
        f"--data.blocks={world['blocks']}",
        f"--data.sentences={world['pretrain']}",
        f"--data.heldout={world['heldout']}",
    ]


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        WANDB_MODE="disabled",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS="1",
        PYTHONPATH=str(ROOT),
    )
    return env


def run_module(module: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """Runs ``python -m module args`` from the repository root; fails the test with its output on error."""
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"{module} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return proc


def last_json(stdout: str) -> dict:
    """The JSON object the trainer prints last (its run summary)."""
    start = stdout.rindex("{\n")
    return json.loads(stdout[start:])
