"""``retriever.frozen``: the control that trains the encoder on what the starting retriever finds, on one index."""

import math

import pytest
import yaml
from safetensors.torch import load_file

from realm.core.logging import read_metrics
from realm.run.publication import list_published
from tests.helpers import data_overrides, last_json, run_module

pytestmark = pytest.mark.slow
TINY = "configs/pretrain/tiny.yaml"


def _weights(checkpoint) -> dict:
    return load_file(checkpoint / "model.safetensors")


def test_a_frozen_retriever_trains_the_encoder_on_the_initial_index_only(tiny_world, tmp_path):
    run = tmp_path / "run"
    # refresh every 2 steps with max_staleness 0: an unfrozen run would export and wait for v2 and v4
    common = ["--config", TINY, f"--train.run_dir={run}", "--retriever.frozen=true", "--retriever.explore_slots=1",
              "--retriever.explore_pool=8", "--train.log_interval=1", *data_overrides(tiny_world)]  # fmt: skip
    proc = run_module("realm.trainer.pretrain", *common)
    summary = last_json(proc.stdout)
    assert summary["step"] == 6 and summary["num_retriever_exports"] == 1 and summary["num_index_refreshes"] == 1
    assert yaml.safe_load((run / "config.yaml").read_text())["retriever"]["frozen"] is True
    assert [p.name for _, p in list_published(run / "retriever", "step-")] == ["step-00000000"]
    assert [p.name for _, p in list_published(run / "index", "v-")] == ["v-00000000"]
    records = read_metrics(run / "metrics.jsonl")
    assert sorted(r["step"] for r in records if "train/loss" in r) == [1, 2, 3, 4, 5, 6]
    assert {r["index/version"] for r in records if "index/version" in r} == {0}
    assert all(math.isfinite(r["train/loss"]) for r in records if "train/loss" in r)

    # the last checkpoint's retriever is the exported start, bit for bit; the encoder moved after step 3
    start = load_file(run / "retriever" / "step-00000000" / "query" / "model.safetensors")
    mid, end = (_weights(run / "checkpoints" / name) for name in ("step-00000003", "step-00000006"))
    prefix = "retriever.query_embedder."
    assert {k[len(prefix):] for k in end if k.startswith(prefix)} == set(start)
    assert all(end[prefix + k].equal(v) for k, v in start.items())
    encoder = [k for k in end if k.startswith("encoder.")]
    assert encoder and any(not end[k].equal(mid[k]) for k in encoder)
    assert "retriever frozen" in proc.stderr  # the one INFO line at start
