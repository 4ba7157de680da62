"""The continuous-cache baseline: each token's neighbours are exactly the earlier tokens of its own document."""

from __future__ import annotations

import math

import pytest
import torch

from realm.knnlm.cache import cache_neighbours


@pytest.mark.parametrize("metric", ["l2", "ip"])
def test_neighbours_are_the_best_earlier_tokens_of_the_same_document(metric):
    generator = torch.Generator().manual_seed(0)
    docs = torch.tensor([0, 0, 0, 0, 0, 1, 1, 1, 2])
    keys, targets = torch.randn(9, 3, generator=generator), torch.randint(0, 5, (9,), generator=generator)
    scores, values = cache_neighbours(keys, targets, docs, k=3, metric=metric)
    for t in range(9):
        history = [j for j in range(t) if docs[j] == docs[t]]
        score = {j: float(keys[t] @ keys[j]) if metric == "ip" else -float(((keys[t] - keys[j]) ** 2).sum())
                 for j in history}  # fmt: skip
        best = sorted(history, key=lambda j: -score[j])[:3]
        assert scores[t, : len(best)].tolist() == pytest.approx([score[j] for j in best], abs=1e-5)
        assert values[t, : len(best)].tolist() == [int(targets[j]) for j in best]
        assert all(math.isinf(s) and s < 0 for s in scores[t, len(best) :].tolist())  # the rest unfilled
    assert torch.isneginf(scores[[0, 5, 8]]).all()  # a document's first token has an empty cache


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="one row per token"):
        cache_neighbours(torch.zeros(3, 2), torch.zeros(2, dtype=torch.long), torch.zeros(3, dtype=torch.long), 2)
