"""The array packing of pairs and blocks (``Ragged``, ``pack_ragged_pairs``) against ``pack_pair``, the per-pair list
form that states REALM's layout; ``Ragged``'s constructors and gathers against the lists they stand for; and
``contains_runs`` against ``contains_run``."""

import numpy as np
import pyarrow as pa
import pytest
import torch

from realm.data.packing import (
    Ragged, SpecialIds, block_batch, contains_run, contains_runs, pack_blocks, pack_pair, pack_pairs, pad,
)

SPECIAL = SpecialIds(cls=101, sep=102, pad=0, mask=103)


def reference(firsts, seconds, max_length, first_cap=None):
    """``pack_pair`` pair by pair, then padded: the layout as the list code states it."""
    packed = [pack_pair(list(f)[:first_cap] if first_cap else f, s, SPECIAL, max_length)
              for f, s in zip(firsts, seconds)]  # fmt: skip
    ids, mask = pad([p[0] for p in packed], SPECIAL.pad)
    types, _ = pad([p[1] for p in packed], 0, ids.shape[1])
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def random_sequences(rng, n, longest):
    # note: empty sequences and ones far over any room included, so every cut and pad branch is taken
    return [rng.integers(5, 30000, int(k)).tolist() for k in rng.integers(0, longest + 1, n)]


def assert_same(got, want):
    assert got.keys() == want.keys()
    for key in want:
        assert got[key].dtype == torch.long, key
        torch.testing.assert_close(got[key], want[key], rtol=0, atol=0, msg=key)


@pytest.mark.parametrize("max_length", [8, 17, 64])
def test_pairs_and_blocks_packed_by_arrays_equal_pack_pair_pair_by_pair(max_length):
    rng = np.random.default_rng(max_length)
    firsts = random_sequences(rng, 40, max_length - 3)
    seconds = random_sequences(rng, 40, 2 * max_length)
    assert_same(pack_pairs(firsts, seconds, SPECIAL, max_length), reference(firsts, seconds, max_length))
    titles = random_sequences(rng, 40, max_length)  # note: titles over half the block are cut to half
    assert_same(block_batch(titles, seconds, SPECIAL, max_length),
                reference(titles, seconds, max_length, first_cap=max_length // 2))  # fmt: skip


def test_a_first_segment_that_does_not_fit_is_an_error_naming_its_length():
    with pytest.raises(ValueError, match="first segment of 6 wordpieces does not fit in max_length=8"):
        pack_pairs([[1], [1, 2, 3, 4, 5, 6]], [[7], [8]], SPECIAL, 8)


def test_no_pairs_pack_to_empty_tensors():
    got = pack_pairs([], [], SPECIAL, 16)
    assert [tuple(t.shape) for t in got.values()] == [(0, 0)] * 3


def test_ragged_from_a_gathered_arrow_column_with_nulls_and_an_offset_is_the_lists_it_holds():
    lists = [[1, 2, 3], [], None, [4], [5, 6, 7, 8], [9]]
    column = pa.chunked_array([pa.array(lists[:2], pa.list_(pa.int32())), pa.array(lists[2:], pa.list_(pa.int32()))])
    sliced = column.slice(1)  # note: an array offset, as a gather or a slice of a table leaves
    ragged = Ragged.from_arrow(sliced)
    want = [row or [] for row in lists[1:]]
    assert len(ragged) == len(want)
    assert [ragged.values[a:b].tolist() for a, b in zip(ragged.offsets[:-1], ragged.offsets[1:])] == want
    part = ragged.slice(2, 4)
    assert [part.values[a:b].tolist() for a, b in zip(part.offsets[:-1], part.offsets[1:])] == want[2:4]
    bodies = Ragged.of([[11, 12]] * len(want))
    assert_same(pack_blocks(ragged, bodies, SPECIAL, 10), block_batch(want, [[11, 12]] * len(want), SPECIAL, 10))


def test_ragged_take_spread_and_from_padded_are_the_lists_they_stand_for():
    rng = np.random.default_rng(3)
    lists = random_sequences(rng, 30, 12)
    ragged = Ragged.of(lists)
    assert ragged.to_lists() == lists
    rows = rng.integers(0, len(lists), 50)  # note: repeats and any order
    assert ragged.take(rows).to_lists() == [lists[i] for i in rows]
    part = ragged.slice(5, 15)  # note: a slice's offsets do not start at 0
    assert part.take([9, 0, 9]).to_lists() == [lists[14], lists[5], lists[14]]
    present = np.zeros(25, dtype=bool)
    present[rng.choice(25, 10, replace=False)] = True
    spread = part.spread(present)
    want, taken = [], iter(lists[5:15])
    for here in present:
        want.append(next(taken) if here else [])
    assert spread.to_lists() == want
    with pytest.raises(ValueError, match="9 places for 10 sequences"):
        part.spread(present & (np.cumsum(present) < 10))
    ids = rng.integers(0, 100, (6, 9))
    keep = rng.random((6, 9)) < 0.5
    assert Ragged.from_padded(ids, keep).to_lists() == [row[k].tolist() for row, k in zip(ids, keep)]


def test_contains_runs_is_contains_run_pair_by_pair():
    rng = np.random.default_rng(4)
    # note: a small alphabet, so partial matches, repeats and overlapping starts are common
    haystacks = [rng.integers(0, 4, int(k)).tolist() for k in rng.integers(0, 12, 400)]
    needles = [rng.integers(0, 4, int(k)).tolist() for k in rng.integers(0, 5, 400)]
    needles[:3] = [[], haystacks[1] + [0], haystacks[2]]  # empty; longer than its haystack; the whole haystack
    got = contains_runs(Ragged.of(haystacks), Ragged.of(needles))
    want = [contains_run(h, n) for h, n in zip(haystacks, needles)]
    assert got.tolist() == want
    assert 50 < sum(want) < 350  # note: both answers common enough to be tested
    assert contains_runs(Ragged.of([]), Ragged.of([])).tolist() == []
