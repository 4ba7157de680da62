"""Two fine-tuning processes (DDP over gloo on CPU, through launch/finetune.sh) step like one process with the whole
batch; the main process alone builds the frozen index, writes metrics and publishes the model."""

import json
from pathlib import Path

import pytest

from realm.config import save_config
from realm.logging import read_metrics
from tests.integration.conftest import launch_two_processes, run_module, tiny_qa_config

pytestmark = [pytest.mark.slow, pytest.mark.distributed]
STEPS = 5


def _losses(out: Path) -> dict[int, tuple[float, float]]:
    return {r["step"]: (r["train/loss"], r["train/reader_loss"]) for r in read_metrics(out / "metrics.jsonl")
            if "train/loss" in r}  # fmt: skip


def test_two_finetuning_processes_step_like_one_process_with_the_whole_batch(qa_world, tmp_path):
    cfg = tiny_qa_config(qa_world, tmp_path / "unused", steps=STEPS, batch_size=8)
    cfg.finetune.log_interval = 1
    cfg.finetune.eval_at_start = False
    cfg.task.dev = ""
    save_config(cfg, tmp_path / "qa.yaml")
    one, two = tmp_path / "one", tmp_path / "two"
    run_module("trainer.finetune", "--config", str(tmp_path / "qa.yaml"), f"--out={one}")
    proc = launch_two_processes(
        "launch/finetune.sh", "--config", str(tmp_path / "qa.yaml"), f"--out={two}", "--finetune.batch_size=4"
    )
    assert "fine-tuning on 2 process(es) x batch 4 = global batch 8" in proc.stderr  # one group, not 2 copies
    a, b = _losses(one), _losses(two)
    assert sorted(a) == sorted(b) == list(range(1, STEPS + 1))  # one writer of metrics
    assert len({loss for loss, _ in a.values()}) == STEPS  # the model moves, so equal losses mean equal steps
    for step in a:
        assert b[step] == pytest.approx(a[step], rel=1e-5, abs=1e-6), f"step {step}: {a[step]} vs {b[step]}"
    # one frozen index (built by the main process) and one published model
    assert len(list((two / "index").glob("v-*"))) == 1
    manifest = json.loads((two / "model" / "manifest.json").read_text())
    assert manifest["kind"] == "qa_model" and manifest["step"] == STEPS
    assert not [p for p in two.iterdir() if p.name.startswith(".staging")]
