"""The reader warm-up reads the sentences of a bounded, seeded sample of training blocks (task.max_blocks), never a
held-out one, and each sentence keeps the row of its block in the whole corpus."""

from __future__ import annotations

import datasets
import numpy as np

from realm.pretrain.reader_warmup import block_sentence_records, skip_unsampled

TEXTS = [f"Block {i} says one thing. Block {i} says another." for i in range(10)]


def test_records_skip_the_masked_blocks_and_keep_corpus_rows():
    blocks = datasets.Dataset.from_dict({"text": TEXTS})
    skipped = np.zeros(10, dtype=bool)
    skipped[[0, 3, 4]] = True
    records = block_sentence_records(blocks, skipped)
    assert sorted(set(records["block_id"])) == [1, 2, 5, 6, 7, 8, 9] and len(records) == 14
    for text, block_id in zip(records["text"], records["block_id"]):
        assert text.startswith(f"Block {block_id} says")
    assert block_sentence_records(blocks)["block_id"] == [i for i in range(10) for _ in range(2)]


def test_skip_unsampled_keeps_max_blocks_training_blocks_seeded():
    heldout = np.zeros(100, dtype=bool)
    heldout[:50] = True
    skipped = skip_unsampled(heldout, 100, 7, seed=0)
    kept = np.flatnonzero(~skipped)
    assert len(kept) == 7 and (kept >= 50).all()  # never a held-out block
    assert np.array_equal(skip_unsampled(heldout, 100, 7, seed=0), skipped)
    assert not np.array_equal(skip_unsampled(heldout, 100, 7, seed=1), skipped)
    assert skip_unsampled(heldout, 100, 0, seed=0) is heldout  # 0: every training block
    assert skip_unsampled(None, 5, 10, seed=0) is None  # fewer blocks than the sample
