"""``experiments/fever/fever_memorisation.py``: the gold-page retrieval reads each claim's own evidence page first."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from experiments.fever import fever_memorisation


def test_the_gold_page_retrieval_puts_each_rows_page_first():
    blocks = ["Rome", "Oslo", "Oslo", "Paris", "Rome"]
    rows = ["Oslo", "Rome", "Oslo"]
    retrieval = fever_memorisation.gold_page_retrieval(blocks, rows)
    batch = SimpleNamespace(example_ids=torch.tensor([2, 1]))  # rows 2 and 1, in a batch of their own
    scores, ids = retrieval["index"].search(retrieval["query_vectors"](batch), k=2)
    assert [set(r) for r in ids.tolist()] == [{1, 2}, {0, 4}]
    assert scores.tolist() == [[1.0, 1.0], [1.0, 1.0]]
    # a block of a page no row asks for (Paris) never scores
    assert retrieval["index"].embeddings[3].sum() == 0
