"""``experiments/real_text/qa_pairs.py``: where two QA rows' exact match differs, split into reading and retrieval,
checked on predictions worked out by hand; bad predictions files give an error that names the file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.real_text import qa_pairs


def _write(folder: Path, rows: list[tuple[str, bool, bool]]) -> Path:
    folder.mkdir(parents=True)
    records = [{"question": q, "correct": c, "span_in_read_blocks": s, "prediction": "x"} for q, c, s in rows]
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def test_each_disagreement_is_counted_once_as_reading_or_retrieval(tmp_path, capsys):
    questions = ["who wrote it", "whom did she marry", "when was it", "what is it", "where is it", "name it"]
    # (a right, a read the span), (b right, b read the span), per question
    a = [(False, True), (False, True), (True, True), (False, False), (True, True), (False, True)]
    b = [(True, True), (True, True), (False, True), (True, True), (True, True), (True, False)]
    a_dir = _write(tmp_path / "a", [(q, c, s) for q, (c, s) in zip(questions, a)])
    b_dir = _write(tmp_path / "b", [(q, c, s) for q, (c, s) in zip(questions, b)])
    assert qa_pairs.main(["--a", str(a_dir), "--b", str(b_dir), "--labels", "ict", "realm",
                          "--json", str(tmp_path / "out.json")]) == 0  # fmt: skip
    pair = json.loads((tmp_path / "out.json").read_text())["pairs"][0]
    # b alone right on questions 0, 1 (both read: reading), 3 (only b read: retrieval), 5 (b right unread: neither)
    assert (pair["b_only"], pair["b_only_reading"], pair["b_only_retrieval"]) == (4, 2, 1)
    assert (pair["a_only"], pair["a_only_reading"], pair["a_only_retrieval"]) == (1, 1, 0)
    assert pair["mcnemar_p"] == pytest.approx(2 * (1 + 5) / 2**5)
    assert pair["words"]["who"] == {"questions": 2, "a_read": 2, "b_read": 2, "a_right_read": 0, "b_right_read": 2,
                                    "b_only": 2}  # fmt: skip
    out = capsys.readouterr().out
    assert "| who | 2 | 2 / 0 | 0 / 2 (0.000) | 2 / 2 (1.000) |" in out
    assert "| other | 1 | 1 / 0 | 0 / 1 (0.000) | 0 / 0 (0.000) |" in out


def test_rows_of_other_questions_are_refused_with_the_first_line_that_differs(tmp_path, capsys):
    a_dir = _write(tmp_path / "a", [("q1", True, True), ("q2", True, True)])
    b_dir = _write(tmp_path / "b", [("q1", True, True), ("q3", True, True)])
    assert qa_pairs.main(["--a", str(a_dir), "--b", str(b_dir)]) == 2
    assert "hold different questions (first difference at line 2)" in capsys.readouterr().err


def test_a_bad_predictions_line_is_named_by_file_and_line(tmp_path):
    folder = _write(tmp_path / "a", [("q1", True, True)])
    with (folder / "predictions.jsonl").open("a") as f:
        f.write('{"question": "q2"}\n')
    with pytest.raises(qa_pairs.BenchError, match=r"predictions.jsonl:2: not a realm evaluate record"):
        qa_pairs.load_predictions(folder)
    with pytest.raises(qa_pairs.BenchError, match="no such file"):
        qa_pairs.load_predictions(tmp_path / "missing")
