"""ICT: the in-batch loss against enumeration, and the sentence removed from its block 90% of the time."""

import math

import pytest
import torch

from realm.data.packing import SpecialIds
from realm.pretrain.ict import ICTCollator, ict_loss

SPECIAL = SpecialIds(cls=2, sep=3, pad=0, mask=4)


def test_ict_loss_equals_enumeration():
    g = torch.Generator().manual_seed(0)
    q, d = torch.randn(4, 8, generator=g, dtype=torch.float64), torch.randn(6, 8, generator=g, dtype=torch.float64)
    loss, _ = ict_loss(q, d, label_offset=2)
    expected = 0.0
    for i in range(4):
        scores = [float(q[i] @ d[j]) for j in range(6)]
        expected += -(scores[i + 2] - math.log(sum(math.exp(s) for s in scores)))
    assert loss.item() == pytest.approx(expected / 4, rel=1e-9)


def test_query_sentence_is_removed_from_its_block_about_90_percent_of_the_time():
    collator = ICTCollator(SPECIAL, max_query_length=8, max_block_length=32, remove_prob=0.9, seed=0)
    sentences = [[10, 11], [20, 21], [30, 31]]
    removed = 0
    n = 400
    for i in range(n):
        batch = collator([{"title_ids": [7], "sentence_ids": sentences, "idx": i}])
        query = batch.query_input_ids[0][1:3].tolist()
        block = batch.block_input_ids[0][batch.block_attention_mask[0].bool()].tolist()
        assert block[:3] == [SPECIAL.cls, 7, SPECIAL.sep]  # [CLS] title [SEP] context [SEP]
        body = block[3:-1]
        if query[0] not in body:
            removed += 1
            assert body == [t for s in sentences if s != query for t in s]
    assert 0.85 < removed / n < 0.95


def test_query_masking_hides_one_run_of_the_query_at_the_asked_rate_and_nothing_else():
    sentences = [[10, 11, 12, 13, 14, 15], [20, 21]]
    plain = ICTCollator(SPECIAL, max_query_length=10, max_block_length=32, remove_prob=0.9, seed=0)
    masking = ICTCollator(SPECIAL, 10, 32, 0.9, seed=0, query_mask_prob=0.5, query_mask_max_span=3)
    masked, lengths, n = 0, set(), 400
    for i in range(n):
        ex = {"title_ids": [7], "sentence_ids": sentences, "idx": i}
        before, after = plain([ex]), masking([ex])
        # the draws of ORQA's collator are unchanged: the same sentence, removed from the same block
        assert torch.equal(before.block_input_ids, after.block_input_ids)
        query, original = after.query_input_ids[0].tolist(), before.query_input_ids[0].tolist()
        hidden = [j for j, t in enumerate(query) if t == SPECIAL.mask]
        if hidden:
            masked += 1
            lengths.add(len(hidden))
            assert hidden == list(range(hidden[0], hidden[-1] + 1))  # one contiguous run
            assert all(original[j] not in (SPECIAL.cls, SPECIAL.sep, SPECIAL.pad) for j in hidden)
            assert len(hidden) < sum(t not in (SPECIAL.cls, SPECIAL.sep, SPECIAL.pad) for t in original)
            assert [t for j, t in enumerate(query) if j not in hidden] == [
                t for j, t in enumerate(original) if j not in hidden
            ]
        else:
            assert query == original
    assert 0.42 < masked / n < 0.58
    assert lengths == {1, 2, 3}
