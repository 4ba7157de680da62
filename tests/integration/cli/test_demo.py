"""`realm demo` end to end at a small size, configured only with dotted keys: every stage runs, summary.json carries
the promised fields, and its log (a pipe, as a log file: not a TTY) is one a person can read."""

import json
import re

import pytest

from realm.pipeline import layout
from tests.helpers import run_module

pytestmark = pytest.mark.slow


def test_demo_writes_summary_with_all_fields(tmp_path):
    run = tmp_path / "demo"
    proc = run_module(
        "realm.cli.demo", f"--out={run}", "--num_entities=100", "--warm_start.warmup_steps=5",
        "--warm_start.ict_steps", "10", "--pretrain_steps=6", "--refresh.refresh_interval=2", "--refresh.swap_lag=1",
        "--train.log_interval=2", "--train.save_interval=6", "--eval.max_examples=40", "--qa_steps=4",
        "--max_dev_questions", "20", timeout=300,
    )  # fmt: skip
    _assert_readable_log(proc.stderr, proc.stdout, run)
    summary = json.loads((run / "summary.json").read_text())
    for key in (
        "heldout_accuracy_retrieval",
        "heldout_accuracy_closed_book",
        "gold_recall_at_k_start",
        "gold_recall_at_k_end",
        "num_index_refreshes",
        "trainer_wait_fraction",
        "wall_seconds",
        "qa_exact_match_start",
        "qa_exact_match_end",
    ):
        assert key in summary, key
    for key in (
        "heldout_accuracy_retrieval",
        "heldout_accuracy_closed_book",
        "gold_recall_at_k_start",
        "gold_recall_at_k_end",
        "trainer_wait_fraction",
        "qa_exact_match_start",
        "qa_exact_match_end",
    ):
        assert 0.0 <= summary[key] <= 1.0, (key, summary[key])
    assert summary["qa_steps"] == 4 and summary["qa_num_questions"] == 20
    assert (layout.qa_run(run) / "model" / "manifest.json").is_file()
    assert len((layout.qa_run(run) / "eval" / "dev-step-4" / "predictions.jsonl").read_text().splitlines()) == 20
    # note: >= 1, the first index, which the trainer waits for; how many later versions are swapped in before the
    # last step depends on how fast the machine trains (a GPU finishes 6 steps before a second index is published)
    assert summary["pretrain_steps"] == 6 and summary["num_index_refreshes"] >= 1
    assert summary["num_heldout_examples"] == 40
    assert "held-out accuracy, with retrieval" in proc.stdout
    assert (layout.ict_retriever(run) / "manifest.json").is_file()
    assert (layout.warmup_encoder(run) / "manifest.json").is_file()
    assert summary["stage_seconds"]["warmup_s"] > 0
    # pre-training starts from the warmed-up encoder: its config records the warm start
    assert f"init_encoder: {layout.warmup_encoder(run)}" in (run / "config.yaml").read_text()
    assert (run / "checkpoints" / "step-00000006" / "manifest.json").is_file()
    # the trained networks as transformers / sentence-transformers load them (realm.pretrain.export)
    assert all((run / "model" / name / "manifest.json").is_file() for name in ("encoder", "retriever"))


def _assert_readable_log(log: str, out: str, run) -> None:
    """Stage banners with step totals, step lines with totals, no third-party progress bar, no WARNING for an
    expected event (accelerate's save_state, the projection's fresh init), and the closing lines."""
    banners = re.findall(r"\[(\d)/5\] ([^:]+): (.*)", log)
    assert [(n, name) for n, name, _ in banners] == [("1", "data"), ("2", "reader warm-up"), ("3", "ICT warm start"),
                                                    ("4", "REALM pre-training"), ("5", "QA fine-tuning")], banners
    assert banners[2][2] == f"10 steps -> {layout.ict_dir(run)}" and banners[4][2] == f"4 steps -> {layout.qa_run(run)}"
    for line in ("warm-up step 5/5 ", "ICT step 10/10 ", "step 6/6 loss", "QA step 4/4 loss"):
        assert line in log, line
    assert re.search(r"INFO step [1-5]/6 loss .* ETA \d+s", log), "a step line before the last says how long is left"
    for bar in ("Generating train split", "Saving the dataset", "Map:", "Loading weights", "Writing model shards",
                "\r", "it/s]"):  # fmt: skip
        assert bar not in log, bar
    assert "WARNING" not in log and "LOAD REPORT" not in log and "Removed shared tensor" not in log, log[-3000:]
    assert "a new random projection" in log  # the one line of our own for the projection's fresh init
    assert f"model    {run / 'model'}" in out and f"realm report {run}" in out
    assert f'realm inspect {run} "QUERY"' in out and f"realm export {run} OUT --format" in out
