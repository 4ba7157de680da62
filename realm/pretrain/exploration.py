"""Exploration beyond the top-k: some of a pre-training query's candidate slots sampled from further down the ranking.

REALM marginalises over the top-k only, so a gold block ranked k+1 is never read and its score gets no gradient: a
retriever whose start misses an article stays missing it (experiments/demo/log/2026-11-25-evidence.md, the demo's low
seeds). Filling a few slots by sampling from the best ``explore_pool`` at a raised temperature gives such blocks a
chance to be read. The sampled blocks are ordinary candidates: p(z|x) over the K slots is still the live model's, and a
block that does not help the reader only costs its slot. Held-out evaluation and QA never explore.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def batch_generator(example_ids: Tensor) -> np.random.Generator:
    """A generator seeded by the batch's example rows, so that a batch's draw is the same in every run and after a
    resume, whatever ran before it, and two batches draw differently."""
    return np.random.default_rng([int(i) for i in example_ids.cpu().tolist()] or [0])


def explore_candidates(
    ids: np.ndarray, scores: np.ndarray, keep: np.ndarray, num_retrieved: int, explore_slots: int, temperature: float,
    rng: np.random.Generator,
) -> Tensor:  # fmt: skip
    """Per query: the best ``num_retrieved - explore_slots`` kept blocks, then ``explore_slots`` drawn without
    replacement from the rest of the kept ones by softmax(score / ``temperature``), in score order.

    Args:
        ids: [B, P] retrieved ids, best first; -1 is no result.
        scores: [B, P] their search scores.
        keep: [B, P] which survived the source filter (and are real results).

    Returns:
        [B, num_retrieved] block ids; -1 pads a row that ran out of candidates.
    """
    top = num_retrieved - explore_slots
    out = np.full((ids.shape[0], num_retrieved), -1, dtype=np.int64)
    for row in range(ids.shape[0]):
        kept, kept_scores = ids[row][keep[row]], scores[row][keep[row]].astype(np.float64)
        rest = np.arange(top, len(kept))
        if len(rest) > explore_slots:
            # note: the Gumbel top-k trick draws without replacement by softmax(logits) and, unlike normalised
            # weights, cannot underflow to all zeros at a low temperature
            keys = kept_scores[rest] / temperature + rng.gumbel(size=len(rest))
            rest = np.sort(rest[np.argsort(-keys, kind="stable")[:explore_slots]])
        chosen = np.concatenate([kept[:top], kept[rest]])
        out[row, : len(chosen)] = chosen
    return torch.from_numpy(out)
