"""``realm.data.packing.contains_run``: the contiguous-run search behind the pre-training candidates' answer recall
and QA's ``has_answer``."""

from __future__ import annotations

import random

import pytest

from realm.data.packing import contains_run


@pytest.mark.parametrize(
    "haystack, needle, expected",
    [
        ([9, 5, 6, 9], [5, 6], True),
        ([6, 5], [5, 6], False),  # reversed
        ([5, 9, 6], [5, 6], False),  # split
        ([9, 9, 5, 6], [5, 6], True),  # at the end
        ([9, 9, 5], [5, 6], False),  # cut off by the end
        ([5], [5, 6], False),  # longer than the haystack
        ([9, 5, 6], [], False),  # an empty needle never occurs
        ([], [5], False),
        ([5, 9, 5, 6], [5, 6], True),  # the scan goes on past a first element that starts no match
        (("barack", "obama", "said"), ("barack", "obama"), True),  # word tokens, as has_answer passes them
        (("barack", "obama"), ["barack", "obama"], True),  # a list needle in a tuple haystack
        ([5, 6], (5, 6), True),
    ],
)
def test_contains_run_by_hand(haystack, needle, expected):
    assert contains_run(haystack, needle) is expected


def test_contains_run_agrees_with_a_brute_force_scan():
    rng = random.Random(0)
    for _ in range(3000):
        haystack = [rng.randrange(4) for _ in range(rng.randrange(12))]
        needle = [rng.randrange(4) for _ in range(rng.randrange(1, 4))]
        brute = any(haystack[i : i + len(needle)] == needle for i in range(len(haystack) - len(needle) + 1))
        assert contains_run(haystack, needle) is brute, (haystack, needle)
