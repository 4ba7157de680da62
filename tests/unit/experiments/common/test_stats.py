"""``experiments/common/stats.py``: the mean and its standard error, McNemar's exact p and the permutation p, checked
against the figures worked out by hand and by brute-force enumeration."""

from __future__ import annotations

import itertools
import math

import pytest

from experiments.common import stats


def test_mean_and_standard_error_by_hand():
    mean, err = stats.mean_and_error([0.5, 0.7, 0.9])
    assert mean == pytest.approx(0.7)
    assert err == pytest.approx(0.2 / math.sqrt(3))  # sample sd 0.2 over sqrt(3) runs
    assert math.isnan(stats.mean_and_error([0.4])[1])


@pytest.mark.parametrize("only_a, only_b", [(0, 0), (5, 0), (0, 5), (3, 3), (7, 2), (2, 9), (1, 10)])
def test_the_exact_mcnemar_p_is_the_share_of_sign_patterns_at_least_as_lopsided(only_a, only_b):
    n = only_a + only_b
    lopsided = abs(only_a - only_b)
    # every way the n disagreements could have split under no difference, each equally likely
    patterns = [sum(signs) for signs in itertools.product((0, 1), repeat=n)]
    brute = sum(abs(2 * a - n) >= lopsided for a in patterns) / len(patterns)
    assert stats.mcnemar_p(only_a, only_b) == pytest.approx(brute)


def test_disagreements_count_the_pairs_each_side_alone_gets_right():
    a, b = [1, 1, 0, 0, True, 0], [1, 0, 1, 0, False, 1]
    assert stats.disagreements(a, b) == (2, 2)  # positions 1 and 4 for a; 2 and 5 for b
    assert stats.disagreements(b, a) == (2, 2)
    assert stats.disagreements([1, 1, 1], [0, 1, 0]) == (2, 0)


def test_the_permutation_p_by_hand_one_group_of_two_fine_tunings_a_row():
    # a's values 3, 4 against b's 0, 1: of the 6 ways to give two of them to a, only {3, 4} and {0, 1} are as far
    # from 0 as the observed +6
    assert stats.permutation_p([([3, 4], [0, 1])]) == pytest.approx(1 / 3)
    assert stats.permutation_p([([5], [5])]) == 1.0


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
    totals = [sum(diff(x, y) for x, y in combo) for combo in itertools.product(*orderings)]
    brute = sum(abs(t) >= abs(observed) - 1e-9 for t in totals) / len(totals)
    assert stats.permutation_p(groups) == pytest.approx(brute)
