"""A tiny generated world (64 entities), its vocabulary and blocks, shared by the end-to-end tests."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.demo import make_world_data as make_world

ROOT = Path(__file__).resolve().parents[2]


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
