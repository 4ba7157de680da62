"""``train.compile``: a job whose BERT runs through inductor trains as the eager job does (to rounding) and saves
weights an eager model loads, under the same names."""

from __future__ import annotations

import logging

import pytest
import torch
from safetensors.torch import load_file
from transformers import BertForMaskedLM

from realm.core.config import load_config
from realm.core.logging import read_metrics
from realm.warmstart.warmup import WarmupConfig, train_warmup

pytestmark = pytest.mark.slow


def _warmup(world, run_dir, compile: bool):
    """3 reader warm-up steps of a 1-layer BERT from seed 0 (the demo's recipe has no dropout, so compiled and eager
    steps draw nothing random); returns (loss by step, the published encoder folder)."""
    cfg = load_config(
        WarmupConfig,
        "configs/warmup/demo.yaml",
        {
            "train": {"run_dir": str(run_dir), "max_steps": 3, "batch_size": 8, "log_interval": 1, "compile": compile},
            "data": {"tokenizer": str(world["tokenizer"]), "blocks": str(world["blocks"])},
            "model": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64},
        },
    )
    encoder_dir = train_warmup(cfg)
    losses = {r["step"]: r["warmup/loss"] for r in read_metrics(run_dir / "metrics.jsonl")}
    return losses, encoder_dir


def _checkpoint_keys(run_dir) -> set[str]:
    (weights,) = (run_dir / "checkpoints").glob("step-*/model.safetensors")
    return set(load_file(weights))


def test_compiled_warmup_matches_eager_and_saves_eager_weights(tiny_world, tmp_path, caplog):
    from torch._dynamo.utils import counters

    eager, eager_dir = _warmup(tiny_world, tmp_path / "eager", compile=False)
    counters.clear()
    with caplog.at_level(logging.INFO, logger="realm.training.compilation"):
        compiled, compiled_dir = _warmup(tiny_world, tmp_path / "compiled", compile=True)
    assert counters["stats"]["unique_graphs"] > 0  # inductor did compile something (the option is not a no-op)
    assert any("train.compile: 1 transformers backbone" in r.getMessage() for r in caplog.records)
    assert sorted(eager) == sorted(compiled) == [1, 2, 3]
    for step, loss in eager.items():
        assert compiled[step] == pytest.approx(loss, rel=1e-4), (step, compiled, eager)
    # the same names in the checkpoint (no "_orig_mod." prefix) and in the published folder, which loads eagerly
    assert _checkpoint_keys(tmp_path / "compiled") == _checkpoint_keys(tmp_path / "eager")
    assert not any("_orig_mod" in key for key in _checkpoint_keys(tmp_path / "compiled"))
    mlm, info = BertForMaskedLM.from_pretrained(compiled_dir, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    reference = BertForMaskedLM.from_pretrained(eager_dir)
    for (name, value), (_, expected) in zip(mlm.state_dict().items(), reference.state_dict().items()):
        torch.testing.assert_close(value, expected, rtol=1e-3, atol=1e-5, msg=name)
