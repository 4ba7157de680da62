"""Helpers shared by the tests (fixtures live in the conftest files): paths, a tiny run directory for builder and
publishing tests, tiny configs, and running the project's modules and launch scripts as subprocesses."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import datasets
import numpy as np
import torch
from transformers import BertConfig, BertTokenizer

from realm.core.config import load_config
from realm.data.blocks import BLOCK_FEATURES
from realm.finetune.train import FinetuneConfig
from realm.models.retriever import Retriever, RetrieverConfig
from realm.run import layout

if TYPE_CHECKING:
    from realm.index.mips import IndexConfig

ROOT = Path(__file__).resolve().parents[1]
"""The repository root (subprocesses run there)."""
FIXTURES = ROOT / "tests" / "fixtures"
SHARED_REAL = ROOT.parent / "shared" / "data" / "real"
"""Real evaluation files beside the checkout (tests that need them skip without them)."""
MAX_BLOCK_LENGTH = 24


SMALL_TEXTS = ["Ada Lovelace worked with Charles Babbage.", "The Analytical Engine was a proposed computer."] * 3
"""A corpus small enough to train a vocabulary on in milliseconds (``small_tokenizer``)."""


def small_tokenizer(folder: Path) -> Path:
    """A WordPiece vocabulary of up to 80 entries trained on ``SMALL_TEXTS`` into ``folder`` (all of ``realm vocab``'s
    files: what the tokenizer-folder tests take files away from)."""
    from realm.data.vocab import train_wordpiece

    train_wordpiece(SMALL_TEXTS, 80, folder, min_frequency=1)
    return folder


def publish_index(run_dir: Path, embeddings: np.ndarray, step: int, cfg: IndexConfig | None = None, *,
                  corpus_fingerprint: str = "c") -> Path:  # fmt: skip
    """``embeddings`` ([N, D] float32) indexed and published as ``RUN/index/v-{step}``, not made CURRENT: a build's
    index and publish steps (``realm.index.build_version``) without a model to embed with."""
    from realm.index import versions
    from realm.index.build_version import index_embeddings
    from realm.index.mips import IndexConfig
    from realm.run import publication

    staging = publication.new_staging(layout.index_dir(run_dir))
    np.save(staging / versions.EMBEDDINGS_FILE, embeddings)
    plan = index_embeddings(staging, cfg or IndexConfig())
    return versions.publish_index_version(run_dir, staging, step=step, weights_sha256="w",
                                          corpus_fingerprint=corpus_fingerprint, factory=plan.factory,
                                          started=time.time(), extra=plan.manifest_fields())  # fmt: skip


def make_run(tmp_path: Path, num_blocks: int, max_body: int = 30) -> tuple[Path, Path, Path]:
    """(run_dir, blocks_path, tokenizer_path) with a 40-word vocab and ``num_blocks`` random blocks."""
    words = [f"w{i}" for i in range(40)]
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    tokenizer_path = tmp_path / "tokenizer"
    BertTokenizer(vocab=str(tmp_path / "vocab.txt")).save_pretrained(tokenizer_path)
    rng = np.random.default_rng(0)
    blocks = datasets.Dataset.from_dict(
        {
            "uid": [f"u{i}" for i in range(num_blocks)],
            "doc_id": [f"d{i // 3}" for i in range(num_blocks)],
            "title": [""] * num_blocks,
            "text": [""] * num_blocks,
            "title_ids": [rng.integers(5, 45, rng.integers(1, 4)).tolist() for _ in range(num_blocks)],
            "body_ids": [rng.integers(5, 45, rng.integers(1, max_body)).tolist() for _ in range(num_blocks)],
        },
        features=BLOCK_FEATURES,
    )
    blocks.save_to_disk(tmp_path / "blocks")
    return tmp_path / "run", tmp_path / "blocks", tokenizer_path


def export_tiny(run_dir: Path, step: int, blocks: Path, tokenizer: Path) -> Retriever:
    """Exports a random (seeded by ``step``) 2-layer hidden-32 retriever as ``retriever/step-{step}``."""
    torch.manual_seed(step)
    bert = BertConfig(
        vocab_size=45,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    retriever = Retriever.from_config(bert, RetrieverConfig(embed_dim=16, max_block_length=MAX_BLOCK_LENGTH))
    layout.export_retriever(
        run_dir,
        step,
        retriever,
        blocks_path=str(blocks),
        tokenizer_path=str(tokenizer),
        max_block_length=MAX_BLOCK_LENGTH,
    )
    return retriever


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


def builder_pids(run_dir: Path) -> list[int]:
    """Live (non-zombie) processes running the builder on ``run_dir``."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError, ValueError):
            continue
        if b"realm.index_builder.watch" in cmdline and f"--run_dir={run_dir}".encode() in cmdline and state != "Z":
            pids.append(int(proc.name))
    return pids


def make_tiny_lm(out: Path, num_docs: int = 60, steps: int = 40) -> tuple[Path, Path, Path]:
    """A tiny GPT-2 trained for a few steps on the first documents of a small generated world:
    (LM folder, training corpus jsonl, held-out corpus jsonl)."""
    from realm.data.world import WorldConfig, generate_world
    from realm.knnlm.tiny_lm import TinyLMConfig, train_tiny_lm
    from realm.training.optim import OptimConfig

    records = generate_world(WorldConfig(num_entities=num_docs + 20, seed=7)).corpus
    train, heldout = out / "train.jsonl", out / "heldout.jsonl"
    out.mkdir(parents=True, exist_ok=True)
    train.write_text("".join(json.dumps(r) + "\n" for r in records[:num_docs]))
    heldout.write_text("".join(json.dumps(r) + "\n" for r in records[num_docs:]))
    cfg = TinyLMConfig(
        vocab_size=500, hidden_size=32, num_layers=2, num_heads=2, context_length=32, steps=steps, batch_size=8,
        optim=OptimConfig(lr=3e-3, warmup_steps=5),
    )  # fmt: skip
    lm = train_tiny_lm([r["text"] for r in records[:num_docs]], cfg, out / "lm")
    return lm, train, heldout
