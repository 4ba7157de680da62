"""``bench/evidence.py``'s training-candidate column: the mean of ``train/answer_recall`` over a row's log."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from tests.helpers import ROOT

sys.path.insert(0, str(ROOT / "bench"))  # note: evidence.py imports its sibling ``offline`` first, as a script does
_SPEC = importlib.util.spec_from_file_location("evidence", ROOT / "bench" / "evidence.py")
evidence = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(evidence)


def test_training_recall_is_the_mean_over_the_run_and_over_its_last_fifth(tmp_path):
    path = tmp_path / "metrics.jsonl"
    records = [{"step": s, "train/answer_recall": v, "train/loss": 1.0} for s, v in zip((20, 40, 60, 80, 90, 100),
                                                                                        (0.1, 0.2, 0.3, 0.4, 0.6, 0.8))]
    lines = [json.dumps(r) for r in records[:3]] + ['{"step": 70, "eval/x": 1}'] + [json.dumps(r) for r in records[3:]]
    path.write_text("\n".join(lines) + '\n{"step": 110, "train/answ')  # a torn last line, as a kill leaves it
    got = evidence.training_recall(path, steps=100)
    assert got["train_answer_recall"] == pytest.approx(2.4 / 6)
    assert got["train_answer_recall_end"] == pytest.approx(0.7)  # steps 90 and 100: past 0.8 x 100


def test_a_row_that_logged_no_candidates_has_no_training_recall(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"step": 10, "train/loss": 1.0}) + "\n")
    assert evidence.training_recall(path, steps=100) == {}
    assert evidence.training_recall(tmp_path / "missing.jsonl", steps=100) == {}
