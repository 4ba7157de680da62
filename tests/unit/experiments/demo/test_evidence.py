"""``experiments/demo/evidence.py``'s training-candidate column: the mean of ``train/answer_recall`` over a row's
log."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

import realm.pipeline.demo

from experiments.demo import evidence


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


def test_the_table_shows_the_starting_model_as_a_row_without_the_training_columns():
    start = {"span_accuracy": 0.175, "closed_book_span_accuracy": 0.002, "gold_recall@4": 0.771, "wall_s": 10.0}
    realm = {
        **start, "span_accuracy": 0.471, "gold_recall@4": 0.671, "ict_index_span_accuracy": 0.461,
        "doc_cosine_ict_final": 0.807, "train_answer_recall": 0.309, "train_answer_recall_end": 0.37, "wall_s": 684.0,
    }  # fmt: skip
    lines = evidence.format_table({"prepare": {"wall_s": 184.0}, "start": start, "realm": realm}).splitlines()
    assert lines[2] == "| start | 0.175 | 0.002 | 0.771 |  |  |  |  | 10 |"
    assert lines[3] == "| realm | 0.471 | 0.002 | 0.671 |  | 0.461 | 0.807 | 0.309 / 0.370 | 684 |"
    assert lines[4] == "(shared start: world, reader warm-up and ICT in 184 s)"


def test_ict_steps_reach_the_shared_start(monkeypatch, tmp_path):
    seen = {}

    def fake_warm_start(cfg, out, seed, data, model):
        seen["ict_steps"] = cfg.ict_steps
        return SimpleNamespace(encoder=out / "warmup" / "encoder", retriever=out / "ict" / "retriever", seconds={})

    files = {name: tmp_path / f"{name}.jsonl" for name in ("pretrain", "heldout")}
    # note: the shared start is the demo's own (realm.pipeline.demo), only its stages stubbed
    monkeypatch.setattr(realm.pipeline.demo, "make_world_data",
                        lambda *a: {**files, "tokenizer": tmp_path / "tok", "blocks": tmp_path / "b"})  # fmt: skip
    monkeypatch.setattr(realm.pipeline.demo, "warm_start", fake_warm_start)
    paths = evidence.prepare(tmp_path, seed=0, entities=8, ict_steps=40)
    assert seen["ict_steps"] == 40 and paths["retriever"] == tmp_path / "ict" / "retriever"
    evidence.prepare(tmp_path, seed=0, entities=8)
    assert seen["ict_steps"] is None  # the demo's own ICT steps


def test_ict_steps_below_one_are_refused_before_any_work(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        evidence.main(["--ict-steps", "0", "--out", str(tmp_path / "ev")])
    assert exit_info.value.code == 2
    assert "--ict-steps must be at least 1" in capsys.readouterr().err
    assert not (tmp_path / "ev").exists()  # refused before the shared start wrote anything


def test_majority_guesses_each_relations_most_common_answer_in_x(tmp_path):
    def write(name, records):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in records))
        return tmp_path / name

    x = [("born", "1900"), ("born", "1900"), ("born", "1950"), ("country", "Avel"), ("country", "Avel")]
    heldout = [("born", "1900"), ("born", "1950"), ("country", "Avel"), ("founded", "1800")]
    paths = {
        "pretrain": write("x.jsonl", [{"relation": r, "answer": a} for r, a in x]),
        "heldout": write("h.jsonl", [{"relation": r, "answer": a} for r, a in heldout]),
    }
    row = evidence.majority_row(paths)
    assert row["span_accuracy"] == pytest.approx(2 / 4) and row["num_examples"] == 4  # no X answer for "founded"


def test_the_ratios_name_each_denominator_and_skip_missing_or_zero_ones():
    table = {"realm": {"span_accuracy": 0.6, "closed_book_span_accuracy": 0.0}, "closed_book": {"span_accuracy": 0.2},
             "majority": {"span_accuracy": 0.015}}  # fmt: skip
    assert evidence.ratios(table) == [
        "realm / the closed_book row (trained without retrieval): 0.600 / 0.200 = 3.0x",
        "realm / the majority guess per relation: 0.600 / 0.015 = 40.0x",
    ]
    assert evidence.ratios({"closed_book": {"span_accuracy": 0.2}}) == []
