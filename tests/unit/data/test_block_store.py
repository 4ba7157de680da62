"""BlockStore gives each block's wordpieces whether it holds them in memory (flat int32 arrays and offsets) or reads
them from Arrow on demand, on a table with an indices mapping (a selection) and with empty rows."""

import datasets
import pytest

from realm.data.block_store import BlockStore


def _blocks() -> datasets.Dataset:
    titles = [[5, 6], [], [7], [8, 9, 10], [11]]
    bodies = [[20, 21, 22], [23], [], [24, 25], [26, 27, 28, 29]]
    table = datasets.Dataset.from_dict({
        "uid": [f"b{i}" for i in range(5)], "title": [f"t{i}" for i in range(5)],
        "text": [f"x{i}" for i in range(5)], "title_ids": titles, "body_ids": bodies,
    })  # fmt: skip
    return table.select([4, 2, 0, 3, 1])  # an indices mapping: row 0 of the store is block b4


def test_in_memory_and_on_demand_stores_give_the_same_wordpieces_in_the_selections_order():
    blocks = _blocks()
    held, read = BlockStore(blocks, in_memory_limit=10), BlockStore(blocks, in_memory_limit=0)
    ids = [0, 1, 2, 3, 4, 2, 0]
    assert held.tokens(ids) == read.tokens(ids)
    titles, bodies = held.tokens(ids)
    assert titles == [[11], [7], [5, 6], [8, 9, 10], [], [5, 6], [11]]
    assert bodies == [[26, 27, 28, 29], [], [20, 21, 22], [24, 25], [23], [20, 21, 22], [26, 27, 28, 29]]
    assert all(type(t) is int for row in titles + bodies for t in row)  # Python ints, as the collators expect
    assert held.texts([0, 4]) == (["t4", "t1"], ["x4", "x1"])
    held_titles, held_bodies = held.ragged(ids)
    assert (held_titles.to_lists(), held_bodies.to_lists()) == (titles, bodies)
    assert held_bodies.values.dtype.itemsize == 4  # 4 bytes a wordpiece in memory


@pytest.mark.parametrize("limit", [10, 0])
def test_a_negative_block_id_is_an_error_not_the_last_block(limit):
    store = BlockStore(_blocks(), in_memory_limit=limit)
    with pytest.raises(ValueError, match="block ids must be >= 0"):
        store.ragged([0, -1])
    assert [len(r) for r in store.ragged([])] == [0, 0]
