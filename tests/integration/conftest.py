"""A tiny generated world (64 entities), its vocabulary and blocks, shared by the end-to-end tests."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from finetune.train import FinetuneConfig
from realm.core.config import load_config
from realm_cli.demo import make_world_data as make_world

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory) -> dict[str, Path]:
    return make_world(
        tmp_path_factory.mktemp("tiny_world"), seed=3, num_entities=64, vocab_size=2000, max_block_length=48
    )


@pytest.fixture(scope="session")
def qa_world(tmp_path_factory) -> dict[str, Path]:
    return make_world(tmp_path_factory.mktemp("qa_world"), seed=5, num_entities=12, vocab_size=600, max_block_length=64)


def tiny_qa_config(world: dict[str, Path], out: Path, steps: int, batch_size: int = 8) -> FinetuneConfig:
    """Fine-tuning from scratch (a 2-layer hidden-48 BERT, no dropout) on the questions of ``qa_world``."""
    overrides = {
        "train": {"run_dir": str(out), "max_steps": steps, "batch_size": batch_size, "log_interval": 20,
                  "num_threads": 1},
        "finetune": {"retriever_beam": 50, "eval_batch_size": 16},
        "task": {"name": "jsonl", "train": str(world["questions"]), "dev": str(world["questions"])},
        "data": {"tokenizer": str(world["tokenizer"]), "blocks": str(world["blocks"])},
        "reader": {"span_hidden_size": 32, "max_question_length": 24, "max_sequence_length": 88},
        "model": {"hidden_size": 48, "num_layers": 2, "num_heads": 4, "intermediate_size": 96,
                  "max_position_embeddings": 128, "dropout": 0.0},
        "retriever": {"embed_dim": 32, "max_block_length": 64, "pooling": "mean"},
        "optim": {"lr": 3e-3, "warmup_steps": 10, "retriever_lr_scale": 1.0},
    }  # fmt: skip
    return load_config(FinetuneConfig, overrides=overrides)


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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_two_processes(script: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """``TOPOLOGY=multi_cpu SCRIPT ARGS`` (a launch/ script): accelerate's launcher with 2 gloo processes on CPU."""
    env = subprocess_env()
    env.update(TOPOLOGY="multi_cpu", MAIN_PROCESS_PORT=str(_free_port()))
    # note: the launcher the script finds must be this interpreter's accelerate
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    proc = subprocess.run(["bash", script, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"launch failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return proc
