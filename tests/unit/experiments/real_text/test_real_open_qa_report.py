"""``experiments/real_text/real_open_qa_report.py``: the table's lines, the paired differences between QA rows over
seeds (and per fine-tuning seed), and how far a row's own fine-tuning seeds lie apart."""

from __future__ import annotations

import math

import pytest

from experiments.real_text import real_open_qa_report as report


def test_the_table_has_a_line_for_each_retriever_measured_and_no_pairs_without_realm():
    row = {s: {f"top_{k}{a}": 0.5 for k in (1, 5, 20) for a in ("", "_answerable")} for s in report.EVAL_SETS}
    result = {"runs": {("minilm", 0): {"cloze": {}, "retrieval": {"bm25": row, "start": row}}}}
    lines = report.format_table(result).splitlines()
    assert len(lines) == 4
    assert lines[2].startswith("| minilm s0 | bm25 |") and lines[3].startswith("| minilm s0 | start |")
    assert report.paired(result) == ""


def test_the_paired_difference_of_one_seed_has_no_standard_error_and_of_two_has_one():
    def run(ict: float, realm: float) -> dict:
        rows = {name: {"nq": {"top_20_answerable": value}} for name, value in (("ict", ict), ("realm", realm))}
        return {"retrieval": rows}

    one = report.paired({"runs": {("minilm", 0): run(0.4, 0.5)}})
    assert "nq top-20 answerable: +0.100 over 1 seed(s), positive in 1" in one and "±" not in one
    two = report.paired({"runs": {("scratch", 0): run(0.5, 0.7), ("scratch", 1): run(0.4, 0.4)}})
    assert "nq top-20 answerable: +0.100 ± 0.100 over 2 seed(s), positive in 1" in two


def test_the_paired_differences_cover_every_set_for_both_columns():
    def run(delta: float) -> dict:
        cell = {s: {"top_20_answerable": 0.5, "em_answerable": 0.1} for s in report.EVAL_SETS}
        moved = {s: {"top_20_answerable": 0.5 + delta, "em_answerable": 0.1 - delta} for s in report.EVAL_SETS}
        return {"retrieval": {"ict": cell, "realm": moved}, "qa": {"ict": cell, "realm": moved}}

    lines = report.paired({"runs": {("minilm", 0): run(0.02), ("minilm", 1): run(0.04)}}).splitlines()
    assert len(lines) == 2 * len(report.EVAL_SETS)
    for set_name in report.EVAL_SETS:
        head = f"minilm: realm - ict, {set_name}"
        assert f"{head} top-20 answerable: +0.030 ± 0.010 over 2 seed(s), positive in 2" in lines
        assert f"{head} EM answerable: -0.030 ± 0.010 over 2 seed(s), positive in 0" in lines


def test_the_paired_lines_count_the_answerable_questions_only_one_qa_row_gets_right():
    def run(ict: list[int], realm: list[int]) -> dict:
        rows = {n: {"nq": {"top_20_answerable": 0.5}} for n in ("ict", "realm")}
        qa = {n: {"nq": {"em_answerable": sum(c) / len(c), "replicas": [c]}} for n, c in
              (("ict", ict), ("realm", realm))}  # fmt: skip
        return {"retrieval": rows, "qa": qa}

    result = {"runs": {("minilm", 0): run([1, 0, 0, 0, 0, 1], [1, 1, 1, 1, 1, 0]),
                       ("minilm", 1): run([0, 0], [0, 0])}}  # fmt: skip
    lines = report.paired(result).splitlines()
    # seed 0: realm alone right on 4 questions, ict alone on 1: p = 2 * (1 + 5) / 2**5
    assert "minilm s0: nq answerable questions right with realm only 4, ict only 1, exact McNemar p 0.375" in lines
    assert "minilm s1: nq answerable questions right with realm only 0, ict only 0, exact McNemar p 1.000" in lines


def test_the_warm_row_reads_with_icts_retriever_and_pairs_with_realm_on_exact_match_only():
    def cells(top20: float) -> dict:
        row = {f"top_{k}{a}": top20 for k in (1, 5, 20) for a in ("", "_answerable")}
        return {s: row for s in report.EVAL_SETS}

    def em(value: float) -> dict:
        return {s: {"em": value, "em_answerable": value} for s in report.EVAL_SETS}

    run = {"cloze": {}, "retrieval": {"ict": cells(0.4), "realm": cells(0.5)},
           "qa": {"ict": em(0.01), "warm": em(0.02), "realm": em(0.05)}}  # fmt: skip
    table = report.format_table({"runs": {("minilm", 0): run}}).splitlines()
    warm = next(line for line in table if line.startswith("| minilm s0 | warm |"))
    assert warm.count("0.400 / 0.400 / 0.400") == 2 * len(report.EVAL_SETS) and "0.020 (0.020)" in warm
    lines = report.paired({"runs": {("minilm", 0): run}}).splitlines()
    assert "minilm: realm - warm, nq EM answerable: +0.030 over 1 seed(s), positive in 1" in lines
    assert not any("realm - warm" in line and "top-20" in line for line in lines)
    # without a warm row there is no realm - warm line at all
    del run["qa"]["warm"]
    assert not any("warm" in line for line in report.paired({"runs": {("minilm", 0): run}}).splitlines())
    assert "| warm |" not in report.format_table({"runs": {("minilm", 0): run}})


def test_a_rows_fine_tuning_seeds_are_averaged_and_each_ones_answers_kept_in_seed_order():
    first = {"nq": {"em": 0.2, "em_answerable": 0.5, "correct_answerable": [1, 0]}}
    second = {"nq": {"em": 0.4, "em_answerable": 1.0, "correct_answerable": [1, 1]}}
    row = report.mean_of_replicas([first, second])
    assert row == {"nq": {"em": pytest.approx(0.3), "em_answerable": 0.75, "replicas": [[1, 0], [1, 1]]}}
    assert report.mean_of_replicas([first])["nq"]["replicas"] == [[1, 0]]


def _replicated(ict: list[list[int]], realm: list[list[int]]) -> dict:
    qa = {n: {"nq": {"em_answerable": sum(map(sum, c)) / len(c) / len(c[0]), "replicas": c}}
          for n, c in (("ict", ict), ("realm", realm))}  # fmt: skip
    return {"runs": {("minilm", 0): {"retrieval": {}, "qa": qa}}}


def test_with_several_fine_tuning_seeds_the_paired_test_pairs_seed_r_of_one_row_with_seed_r_of_the_other():
    result = _replicated([[1, 0, 0, 0], [1, 1, 1, 0]], [[1, 1, 1, 1], [0, 0, 0, 1]])
    lines = report.paired(result).splitlines()
    assert "minilm: realm - ict, nq EM answerable: +0.125 over 1 seed(s), positive in 1" in lines  # 5/8 - 4/8
    # seed 0: realm alone right on 3, ict on none: p = 2 / 2**3; seed 1: 1 against 3: p = 2 * (1 + 4) / 2**4
    head = "minilm s0: nq answerable questions right with realm only"
    assert f"{head} 3, ict only 0, exact McNemar p 0.250 (fine-tuning seed 0)" in lines
    assert f"{head} 1, ict only 3, exact McNemar p 0.625 (fine-tuning seed 1)" in lines


def test_the_spread_of_a_rows_fine_tuning_seeds_and_the_rows_difference_against_it():
    result = _replicated([[1, 0, 0, 0], [1, 1, 1, 0]], [[1, 1, 1, 1], [0, 0, 0, 1]])
    lines = report.replica_spread(result).splitlines()
    assert lines[0] == ("minilm s0: nq ict, 2 fine-tuning seeds: 1, 3 of 4 answerable questions right; two of them "
                        "disagree on at most 2")  # fmt: skip
    assert lines[1].startswith("minilm s0: nq realm, 2 fine-tuning seeds: 4, 1 of 4") and lines[1].endswith("at most 3")
    # means 2.5 and 2.0; standard errors 1.5 (4, 1) and 1.0 (1, 3), not paired: sqrt(1.5^2 + 1^2)
    assert lines[2] == f"minilm s0: nq realm - ict over fine-tuning seeds: +0.5 ± {math.hypot(1.5, 1.0):.1f} questions"
    # realm 4, 1 against ict 1, 3: the four counts sum to 9, odd, so every split of them two and two is at least
    # as far from 0 as the observed 5 - 4
    assert lines[3] == ("minilm: nq realm - ict over 1 seed(s) and their fine-tuning seeds: +0.5 questions, exact "
                        "permutation p 1.000 (each seed's fine-tunings relabelled between the two rows)")  # fmt: skip
    assert len(lines) == 4
    # one fine-tuning a row: nothing to spread
    assert report.replica_spread(_replicated([[1, 0]], [[1, 1]])) == ""
