"""``experiments/demo/recall_by_relation.py``: recall@k per group of held-out sentences."""

from __future__ import annotations

from experiments.demo import recall_by_relation


def test_recall_counts_each_group_on_its_own():
    ranks = [0, 3, 4, 120, 1, 0]
    groups = ["city/country", "city/country", "city/country", "person/born", "person/born", "org/founder"]
    assert recall_by_relation.recall_by_group(ranks, groups, k=4) == {
        "city/country": {"n": 3, "recall": 2 / 3, "missed": 1},
        "org/founder": {"n": 1, "recall": 1.0, "missed": 0},
        "person/born": {"n": 2, "recall": 0.5, "missed": 1},
    }


def test_a_hub_block_wins_the_exact_search_and_loses_once_queries_are_centred():
    import math

    import torch

    angles = [2 * math.pi * i / 8 for i in range(8)]
    hub = [[1.0, 0.0, 0.0]]
    golds = [[0.6, 0.8 * math.cos(a), 0.8 * math.sin(a)] for a in angles]
    queries = torch.tensor([[0.9, 0.3 * math.cos(a), 0.3 * math.sin(a)] for a in angles])
    blocks = torch.tensor(hub + golds)
    gold = [{i + 1} for i in range(8)]  # query i's article is block i + 1; block 0 is the hub
    ranks, tops = recall_by_relation.gold_ranks(queries @ blocks.T, gold)
    assert ranks == [1] * 8 and all(top[0] == 0 for top in tops)
    recalls = recall_by_relation.hubness_recalls(queries, blocks, gold, k=1)
    assert recalls["exact"] == 0.0 and recalls["queries_centred_1.0"] == 1.0


def test_hiding_the_masks_zeroes_their_attention_and_nothing_else():
    import torch

    ids = torch.tensor([[2, 10, 4, 4, 11, 3, 0], [2, 4, 12, 3, 0, 0, 0]])
    attention = (ids != 0).long()
    hidden = recall_by_relation.masks_hidden(ids, attention, mask_id=4)
    assert hidden.tolist() == [[1, 1, 0, 0, 1, 1, 0], [1, 0, 1, 1, 0, 0, 0]]
    assert attention.tolist()[0] == [1, 1, 1, 1, 1, 1, 0]  # the batch's own mask is left as it was
