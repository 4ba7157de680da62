"""Two fine-tuning processes (DDP over gloo on CPU, through launch/finetune.sh) step like one process with the whole
batch; the main process alone builds the frozen index, writes metrics and publishes the model; the dev evaluation is
sharded over both processes and gives the same predictions, in the same order, as one process."""

import json
from pathlib import Path

import pytest

from realm.core.config import save_config
from realm.core.logging import read_metrics
from tests.helpers import launch_two_processes, run_module, tiny_qa_config

pytestmark = [pytest.mark.slow, pytest.mark.distributed]
STEPS = 5


def _losses(out: Path) -> dict[int, tuple[float, float]]:
    return {r["step"]: (r["train/loss"], r["train/reader_loss"]) for r in read_metrics(out / "metrics.jsonl")
            if "train/loss" in r}  # fmt: skip


def test_two_finetuning_processes_step_like_one_process_with_the_whole_batch(qa_world, tmp_path):
    cfg = tiny_qa_config(qa_world, tmp_path / "unused", steps=STEPS, batch_size=8)
    cfg.train.log_interval = 1
    cfg.train.precision = "fp32"  # note: equal to 1e-5 in fp32; bf16 rounds a split batch differently
    cfg.finetune.eval_at_start = False  # one dev evaluation, after the last step
    save_config(cfg, tmp_path / "qa.yaml")
    one, two = tmp_path / "one", tmp_path / "two"
    run_module("realm.finetune.train", "--config", str(tmp_path / "qa.yaml"), f"--train.run_dir={one}")
    proc = launch_two_processes(
        "launch/finetune.sh", "--config", str(tmp_path / "qa.yaml"), f"--train.run_dir={two}", "--train.batch_size=4"
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

    def evaluation(out: Path) -> tuple[dict, list[dict]]:
        folder = out / "eval" / f"dev-step-{STEPS}"
        records = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines()]
        return json.loads((folder / "metrics.json").read_text()), records

    (metrics_one, records_one), (metrics_two, records_two) = evaluation(one), evaluation(two)
    assert metrics_two == pytest.approx(metrics_one) and metrics_two["num_questions"] == len(records_one) > 2
    assert [r["question"] for r in records_two] == [r["question"] for r in records_one]  # file order kept
    for r1, r2 in zip(records_one, records_two):
        assert (r2["prediction"], r2["block_ids"], r2["has_answer"]) == (r1["prediction"], r1["block_ids"],
                                                                        r1["has_answer"])  # fmt: skip
