"""Claim verification by fill-in: a claim is judged SUPPORTS when the model, asked to fill in each of the claim's
salient spans in turn (masked, as in pre-training), reproduces every one of them; otherwise REFUTES.

The rule has nothing to tune and needs no verification training data: it asks only whether what the model recalls
(from memory, closed book, or from what it retrieves) agrees with what the claim states, which is the question of
whether memorising the evidence pages lets a model use them. A model that recalls nothing calls every claim REFUTES;
a claim refuted by negation ("X is not Y") keeps spans a correct model reproduces, so even a perfect filler misses
those. A claim without a salient span has nothing to disagree with and is judged SUPPORTS.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def supported(span_correct: np.ndarray, claim_of_row: Sequence[int], num_claims: int) -> np.ndarray:
    """[num_claims] bool: every row (salient span) of the claim was filled in exactly. ``span_correct[i]`` is row
    i's outcome and ``claim_of_row[i]`` the claim it belongs to."""
    judged = np.ones(num_claims, dtype=bool)
    claims = np.asarray(claim_of_row, dtype=np.int64)
    if len(claims) != len(span_correct):
        raise ValueError(f"{len(span_correct)} outcomes for {len(claims)} rows")
    np.logical_and.at(judged, claims, np.asarray(span_correct, dtype=bool))
    return judged


def verification_accuracy(judged_supported: np.ndarray, is_supported: np.ndarray) -> dict[str, float]:
    """Accuracy over all claims and within each gold label (SUPPORTS claims judged SUPPORTS, REFUTES claims judged
    REFUTES)."""
    judged, gold = np.asarray(judged_supported, dtype=bool), np.asarray(is_supported, dtype=bool)
    right = judged == gold
    return {
        "accuracy": float(right.mean()) if len(right) else 0.0,
        "supports_accuracy": float(right[gold].mean()) if gold.any() else 0.0,
        "refutes_accuracy": float(right[~gold].mean()) if (~gold).any() else 0.0,
    }
