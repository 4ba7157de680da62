"""Salient-span masking: exactly one span, inside the sentence, every wordpiece of it; unmaskable examples rejected."""

import random

import pytest

from realm.data.masking import MaskingError, choose_masked_positions, example_rng
from realm.data.packing import SpecialIds
from realm.pretrain.batch import PretrainCollator

SPECIAL = SpecialIds(cls=2, sep=3, pad=0, mask=4)


def test_salient_masks_every_wordpiece_of_exactly_one_span():
    spans = [[1, 3], [5, 6], [7, 10]]
    seen = set()
    for seed in range(50):
        positions = choose_masked_positions(10, spans, None, "salient", random.Random(seed))
        assert [positions[0], positions[-1] + 1] in spans
        assert positions == list(range(positions[0], positions[-1] + 1))
        seen.add(positions[0])
    assert seen == {1, 5, 7}  # every span gets chosen sometimes


def test_spans_outside_the_sentence_are_never_masked():
    # a span cut by truncation ([8, 12) in a 10-wordpiece sentence) is not a candidate
    for seed in range(20):
        assert choose_masked_positions(10, [[8, 12], [2, 4]], None, "salient", random.Random(seed)) == [2, 3]
    with pytest.raises(MaskingError, match="no salient span"):
        choose_masked_positions(10, [[8, 12]], None, "salient", random.Random(0))
    with pytest.raises(MaskingError, match="no salient span"):
        choose_masked_positions(10, [], None, "salient", random.Random(0))


def test_ablation_modes_mask_inside_the_sentence():
    for seed in range(30):
        span = choose_masked_positions(6, [], None, "random_span", random.Random(seed), max_span_length=3)
        assert 1 <= len(span) <= 3 and span == list(range(span[0], span[0] + len(span))) and span[-1] < 6
        tokens = choose_masked_positions(6, [], None, "random_token", random.Random(seed))
        assert tokens and all(0 <= p < 6 for p in tokens)
    assert choose_masked_positions(6, [], [2, 5], "gold", random.Random(0)) == [2, 3, 4]
    with pytest.raises(MaskingError):
        choose_masked_positions(6, [], [4, 9], "gold", random.Random(0))


def test_masking_is_a_function_of_seed_epoch_and_index():
    spans = [[0, 1], [2, 3], [4, 5], [6, 7]]
    a = [choose_masked_positions(8, spans, None, "salient", example_rng(1, 2, i)) for i in range(20)]
    b = [choose_masked_positions(8, spans, None, "salient", example_rng(1, 2, i)) for i in range(20)]
    c = [choose_masked_positions(8, spans, None, "salient", example_rng(1, 3, i)) for i in range(20)]
    assert a == b and a != c


def test_collator_masks_targets_and_rejects_unmaskable_examples():
    collator = PretrainCollator(SPECIAL, max_query_length=8, mode="salient", seed=0)
    examples = [
        {"input_ids": [10, 11, 12, 13], "salient_spans": [[1, 3]], "idx": 0},
        {"input_ids": [20, 21, 22], "salient_spans": [], "idx": 1},  # nothing to mask: rejected
        {"input_ids": [30, 31, 32, 33, 34, 35, 36, 37], "salient_spans": [[5, 7]], "idx": 2},  # beyond 8-2 = 6
    ]
    batch = collator(examples)
    assert collator.num_rejected == 2
    assert batch.query_input_ids[0].tolist() == [2, 10, 4, 4, 13, 3]
    assert batch.mask_positions[0].tolist() == [2, 3] and batch.target_ids[0].tolist() == [11, 12]
    assert batch.example_ids.tolist() == [0]
    with pytest.raises(MaskingError, match="no example"):
        collator(examples[1:])
