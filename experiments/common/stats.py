"""The exact tests and summaries the studies share: the mean with its standard error, paired 0/1 disagreements and
McNemar's exact p, and an exact permutation p over groups of fine-tuning seeds."""

from __future__ import annotations

import math
from collections import Counter
from itertools import combinations


def mean_and_error(values: list[float]) -> tuple[float, float]:
    """The mean and its standard error (sample standard deviation / sqrt(n); nan for one value)."""
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, math.nan
    variance = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return mean, math.sqrt(variance / len(values))


def disagreements(a: list, b: list) -> tuple[int, int]:
    """How many of the paired 0/1 results ``a`` and ``b`` only ``a`` gets right, and how many only ``b``: the counts
    ``mcnemar_p`` tests."""
    return sum(bool(x) and not y for x, y in zip(a, b)), sum(bool(y) and not x for x, y in zip(a, b))


def mcnemar_p(only_a: int, only_b: int) -> float:
    """Exact two-sided McNemar p of two paired 0/1 rows that disagree ``only_a + only_b`` times: under no difference
    each disagreement goes either way with probability 1/2 (a binomial sign test)."""
    n = only_a + only_b
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(min(only_a, only_b) + 1)) / 2**n)


def permutation_p(groups: list[tuple[list[float], list[float]]]) -> float:
    """Exact two-sided p that two rows differ, from each group's values of the one row and of the other (a group: one
    seed's fine-tunings of both rows, which share nothing but their start's seed). Under no difference every
    relabelling of a group's values between the rows is as likely, independently per group; the statistic is the sum
    over groups of mean(one row's) - mean(the other's), and p the share of relabellings at least as far from 0."""
    observed, total = 0.0, Counter({0.0: 1})
    for a, b in groups:
        values = [*a, *b]
        # note: means, not sums, so a row with fewer fine-tunings in a group weighs as much as the other (with sums,
        # 2 against 3 fine-tunings of equal rows would look like a difference of one whole fine-tuning)
        observed += sum(a) / len(a) - sum(b) / len(b)
        whole = sum(values)
        picked = (sum(values[i] for i in chosen) for chosen in combinations(range(len(values)), len(a)))
        here = Counter(s / len(a) - (whole - s) / len(b) for s in picked)
        merged = Counter()
        for t, n in total.items():
            for d, m in here.items():
                merged[t + d] += n * m
        total = merged
    # note: a tolerance, as sums of floats that are equal on paper may differ in their last bit
    return sum(n for t, n in total.items() if abs(t) >= abs(observed) - 1e-9) / sum(total.values())
