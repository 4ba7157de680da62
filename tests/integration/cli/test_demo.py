"""`realm demo` end to end at a small size: every stage runs and summary.json carries the promised fields."""

import json

import pytest

from tests.helpers import run_module

pytestmark = pytest.mark.slow


def test_demo_writes_summary_with_all_fields(tmp_path):
    run = tmp_path / "demo"
    proc = run_module(
        "realm.cli.demo",
        "--out",
        str(run),
        "--entities",
        "100",
        "--warmup-steps",
        "5",
        "--ict-steps",
        "10",
        "--steps",
        "6",
        "--refresh.refresh_interval=2",
        "--refresh.swap_lag=1",
        "--train.log_interval=2",
        "--train.save_interval=6",
        "--eval.max_examples=40",
        "--qa-steps",
        "4",
        "--qa-dev",
        "20",
        timeout=300,
    )
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
    assert (run / "qa" / "model" / "manifest.json").is_file()
    assert len((run / "qa" / "eval" / "dev-step-4" / "predictions.jsonl").read_text().splitlines()) == 20
    # note: >= 1, the first index, which the trainer waits for; how many later versions are swapped in before the
    # last step depends on how fast the machine trains (a GPU finishes 6 steps before a second index is published)
    assert summary["pretrain_steps"] == 6 and summary["num_index_refreshes"] >= 1
    assert summary["num_heldout_examples"] == 40
    assert "held-out accuracy, with retrieval" in proc.stdout
    assert (run / "ict" / "retriever" / "manifest.json").is_file()
    assert (run / "warmup" / "encoder" / "manifest.json").is_file()
    assert summary["stage_seconds"]["warmup_s"] > 0
    # pre-training starts from the warmed-up encoder: its config records the warm start
    assert f"init_encoder: {run / 'warmup' / 'encoder'}" in (run / "config.yaml").read_text()
    assert (run / "checkpoints" / "step-00000006" / "manifest.json").is_file()
    # the trained networks as transformers / sentence-transformers load them (realm.pretrain.export)
    assert all((run / "model" / name / "manifest.json").is_file() for name in ("encoder", "retriever"))
