"""``experiments/demo/evidence_runs.py``: row means, standard errors and paired differences over several evidence tables,
checked against the figures worked out by hand."""

from __future__ import annotations

import itertools
import json
import math

import pytest

from experiments.demo import evidence_runs


def _table(realm: float, frozen: float) -> dict:
    row = {"closed_book_span_accuracy": 0.0, "wall_s": 1.0}
    return {
        "prepare": {"wall_s": 1.0},
        "realm": row | {"span_accuracy": realm, "gold_recall@4": 0.9},
        "frozen": row | {"span_accuracy": frozen, "gold_recall@4": 0.5},
    }


def test_mean_and_standard_error_by_hand():
    mean, err = evidence_runs.mean_and_error([0.5, 0.7, 0.9])
    assert mean == pytest.approx(0.7)
    assert err == pytest.approx(0.2 / math.sqrt(3))  # sample sd 0.2 over sqrt(3) runs
    assert math.isnan(evidence_runs.mean_and_error([0.4])[1])


@pytest.mark.parametrize("only_a, only_b", [(0, 0), (5, 0), (0, 5), (3, 3), (7, 2), (2, 9), (1, 10)])
def test_the_exact_mcnemar_p_is_the_share_of_sign_patterns_at_least_as_lopsided(only_a, only_b):
    n = only_a + only_b
    lopsided = abs(only_a - only_b)
    # every way the n disagreements could have split under no difference, each equally likely
    patterns = [sum(signs) for signs in itertools.product((0, 1), repeat=n)]
    brute = sum(abs(2 * a - n) >= lopsided for a in patterns) / len(patterns)
    assert evidence_runs.mcnemar_p(only_a, only_b) == pytest.approx(brute)


def test_disagreements_count_the_pairs_each_side_alone_gets_right():
    a, b = [1, 1, 0, 0, True, 0], [1, 0, 1, 0, False, 1]
    assert evidence_runs.disagreements(a, b) == (2, 2)  # positions 1 and 4 for a; 2 and 5 for b
    assert evidence_runs.disagreements(b, a) == (2, 2)
    assert evidence_runs.disagreements([1, 1, 1], [0, 1, 0]) == (2, 0)


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


def test_the_permutation_p_by_hand_one_group_of_two_fine_tunings_a_row():
    # a's values 3, 4 against b's 0, 1: of the 6 ways to give two of them to a, only {3, 4} and {0, 1} are as far
    # from 0 as the observed +6
    assert evidence_runs.permutation_p([([3, 4], [0, 1])]) == pytest.approx(1 / 3)
    assert evidence_runs.permutation_p([([5], [5])]) == 1.0


@pytest.mark.parametrize("groups", [
    [([27, 40, 38], [46, 38, 42])],
    [([27, 40, 38], [46, 38, 42]), ([27, 38, 36], [46, 56, 33])],
    [([1.5, 2], [0.5]), ([3], [1, 2, 2])],
    [([31, 45], [27, 40, 38]), ([50, 50], [27, 38, 36])],
])  # fmt: skip
def test_the_permutation_p_is_the_share_of_relabellings_within_each_group_at_least_as_far_from_zero(groups):
    def diff(x, y):
        return sum(x) / len(x) - sum(y) / len(y)

    observed = sum(diff(a, b) for a, b in groups)
    # every ordering of each group's values, its first len(a) taken as a's, each group independently
    orderings = [[(p[:len(a)], p[len(a):]) for p in itertools.permutations([*a, *b])] for a, b in groups]
    stats = [sum(diff(x, y) for x, y in combo) for combo in itertools.product(*orderings)]
    brute = sum(abs(t) >= abs(observed) - 1e-9 for t in stats) / len(stats)
    assert evidence_runs.permutation_p(groups) == pytest.approx(brute)
