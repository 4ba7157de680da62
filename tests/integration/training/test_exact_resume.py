"""Exact resume of every job on the training scaffold: stopped at step 3 and resumed, each job logs the losses of an
uninterrupted run at every step and ends with the same weights (dropout on, so the RNG state is restored too)."""

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from realm.core.config import load_config
from realm.core.logging import read_metrics
from realm.finetune.train import Finetuner
from realm.warmstart.ict_train import ICTConfig, train_ict
from realm.warmstart.warmup import WarmupConfig, train_warmup
from tests.helpers import tiny_qa_config

STEPS, STOP = 6, 3
SMALL_BERT = {"hidden_size": 32, "num_layers": 2, "num_heads": 2, "intermediate_size": 64, "dropout": 0.1}


def _losses(run_dir: Path, key: str) -> dict[int, float]:
    return {r["step"]: r[key] for r in read_metrics(run_dir / "metrics.jsonl") if key in r}


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return {k: v for f in sorted(folder.rglob("*.safetensors")) for k, v in load_file(str(f)).items()}


def _assert_same_run(straight: Path, interrupted: Path, key: str, published: str) -> None:
    a, b = _losses(straight, key), _losses(interrupted, key)
    assert sorted(a) == sorted(b) == list(range(1, STEPS + 1))
    for step in a:
        assert b[step] == pytest.approx(a[step], rel=1e-5, abs=1e-6), f"step {step}: {a[step]} vs {b[step]}"
    wa, wb = _weights(straight / published), _weights(interrupted / published)
    assert wa.keys() == wb.keys() and wa
    for name in wa:
        torch.testing.assert_close(wb[name], wa[name], rtol=1e-5, atol=1e-6, msg=name)


def _run_twice(make_cfg, train, tmp_path: Path) -> tuple[Path, Path]:
    """An uninterrupted run, and one stopped at step ``STOP`` (nothing published) then resumed."""
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    train(make_cfg(straight, 0))
    train(make_cfg(interrupted, STOP))
    assert (interrupted / "checkpoints" / f"step-{STOP:08d}" / "manifest.json").is_file()
    train(make_cfg(interrupted, 0))
    return straight, interrupted


def test_ict_resumes_exactly(tiny_world, tmp_path):
    def cfg(run_dir: Path, stop: int) -> ICTConfig:
        return load_config(ICTConfig, "configs/ict/demo.yaml", {
            "train": {"run_dir": str(run_dir), "max_steps": STEPS, "batch_size": 8, "log_interval": 1,
                      "stop_at_step": stop, "num_threads": 1},
            "data": {"tokenizer": str(tiny_world["tokenizer"]), "blocks": str(tiny_world["blocks"])},
            "model": SMALL_BERT, "retriever": {"embed_dim": 16, "max_block_length": 48},
        })  # fmt: skip

    straight, interrupted = _run_twice(cfg, train_ict, tmp_path)
    _assert_same_run(straight, interrupted, "ict/loss", "retriever")


def test_reader_warmup_resumes_exactly(tiny_world, tmp_path):
    def cfg(run_dir: Path, stop: int) -> WarmupConfig:
        return load_config(WarmupConfig, "configs/warmup/demo.yaml", {
            "train": {"run_dir": str(run_dir), "max_steps": STEPS, "batch_size": 8, "log_interval": 1,
                      "stop_at_step": stop, "num_threads": 1},
            "data": {"tokenizer": str(tiny_world["tokenizer"]), "blocks": str(tiny_world["blocks"])},
            "model": SMALL_BERT, "retriever": {"max_block_length": 48},
        })  # fmt: skip

    straight, interrupted = _run_twice(cfg, train_warmup, tmp_path)
    _assert_same_run(straight, interrupted, "warmup/loss", "encoder")


def test_finetuning_resumes_exactly(qa_world, tmp_path):
    def cfg(run_dir: Path, stop: int):
        cfg = tiny_qa_config(qa_world, run_dir, steps=STEPS, batch_size=4)
        cfg.train.log_interval, cfg.train.stop_at_step, cfg.model.dropout = 1, stop, 0.1
        cfg.finetune.eval_at_start = False
        return cfg

    straight, interrupted = _run_twice(cfg, lambda c: Finetuner(c).train(), tmp_path)
    _assert_same_run(straight, interrupted, "train/loss", "model")
