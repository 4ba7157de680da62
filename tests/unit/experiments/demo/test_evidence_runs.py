"""``experiments/demo/evidence_runs.py``: row means, standard errors and paired differences over several evidence
tables, checked against the figures worked out by hand."""

from __future__ import annotations

import json

import pytest

from experiments.demo import evidence_runs


def _table(realm: float, frozen: float) -> dict:
    row = {"closed_book_span_accuracy": 0.0, "wall_s": 1.0}
    return {
        "prepare": {"wall_s": 1.0},
        "realm": row | {"span_accuracy": realm, "gold_recall@4": 0.9},
        "frozen": row | {"span_accuracy": frozen, "gold_recall@4": 0.5},
    }


def test_paired_differences_count_the_runs_each_way(tmp_path, capsys):
    paths = []
    for i, (realm, frozen) in enumerate([(0.8, 0.6), (0.6, 0.7), (0.9, 0.5)]):
        paths.append(tmp_path / f"ev-{i}.json")
        paths[-1].write_text(json.dumps(_table(realm, frozen)))
    assert evidence_runs.main([str(p) for p in paths]) == 0
    out = capsys.readouterr().out
    assert "| realm | 0.767 ± 0.088 | 0.900 ± 0.000 | 0.800 0.600 0.900 |" in out
    # differences +0.2, -0.1, +0.4: mean 0.167, sample sd 0.252, s.e. 0.145; positive in 2 of 3
    assert "| realm − frozen | +0.167 ± 0.145 | 2 of 3 | +0.200 -0.100 +0.400 |" in out
    assert "prepare" not in out


def test_a_row_missing_from_one_run_is_left_out_and_none_in_common_is_an_error(tmp_path):
    partial = _table(0.5, 0.5)
    del partial["frozen"]
    assert "frozen" not in evidence_runs.summarise([_table(0.8, 0.6), partial])
    with pytest.raises(ValueError, match="no row is in every table"):
        evidence_runs.summarise([{"prepare": {}, "realm": _table(1, 1)["realm"]}, {"prepare": {}}])


def test_each_row_is_compared_with_the_starting_model_as_row_minus_start():
    tables = []
    for start, realm in [(0.2, 0.5), (0.3, 0.2)]:
        table = _table(realm, 0.1)
        tables.append({"prepare": table["prepare"], "start": table["realm"] | {"span_accuracy": start}, **table})
    lines = evidence_runs.summarise(tables).splitlines()
    assert "| realm − start | +0.100 ± 0.200 | 1 of 2 | +0.300 -0.100 |" in lines
    assert "| frozen − start | -0.150 ± 0.050 | 0 of 2 | -0.100 -0.200 |" in lines
    assert not any(line.startswith("| start − ") for line in lines)


