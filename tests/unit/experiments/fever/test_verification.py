"""Claim verification by fill-in: a claim is SUPPORTS exactly when every one of its salient spans is filled in."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.fever.verification import supported, verification_accuracy


def test_a_claim_is_supported_only_when_every_span_is_reproduced():
    # claim 0: spans right, right; claim 1: right, wrong; claim 2: no span at all; claim 3: wrong
    outcomes = np.array([True, True, True, False, False])
    judged = supported(outcomes, [0, 0, 1, 1, 3], num_claims=4)
    assert judged.tolist() == [True, False, True, False]


def test_rows_may_come_in_any_order():
    judged = supported(np.array([True, False, True]), [2, 0, 2], num_claims=3)
    assert judged.tolist() == [False, True, True]


def test_outcomes_and_rows_must_line_up():
    with pytest.raises(ValueError, match="2 outcomes for 3 rows"):
        supported(np.array([True, False]), [0, 1, 1], num_claims=2)


def test_accuracy_overall_and_within_each_label():
    judged = np.array([True, True, False, False, True])
    gold = np.array([True, False, False, True, True])  # 3 SUPPORTS (2 judged so), 2 REFUTES (1 judged so)
    figures = verification_accuracy(judged, gold)
    assert figures == pytest.approx({"accuracy": 3 / 5, "supports_accuracy": 2 / 3, "refutes_accuracy": 1 / 2})
