"""Exploration beyond the top-k and the centred-query search (``RetrieverConfig.explore_slots``, ``center_queries``)."""

import numpy as np
import pytest
import torch

from realm.data.block_store import uid_hash
from realm.index.mips import BruteForceIndex
from realm.models.retriever import RetrieverConfig
from realm.pretrain.exploration import batch_generator, explore_candidates
from tests.unit.pretrain.test_model import SPECIAL, _batch, _store

POOL = 10


def _ranked(rows: int = 1):
    """[rows, POOL] ids 0..9 best first, scores 9..0, all kept but id 3 (a source-filtered block)."""
    ids = np.tile(np.arange(POOL), (rows, 1))
    scores = np.tile(np.arange(POOL, 0, -1, dtype=np.float32), (rows, 1))
    return ids, scores, ids != 3


def test_the_top_slots_stay_and_the_explored_ones_come_from_the_rest_of_the_kept_pool():
    ids, scores, keep = _ranked(rows=200)
    chosen = explore_candidates(ids, scores, keep, 4, 2, 10.0, np.random.default_rng(0)).numpy()
    assert (chosen[:, :2] == [0, 1]).all()  # the best two kept, in order
    explored = chosen[:, 2:]
    assert np.isin(explored, [2, 4, 5, 6, 7, 8, 9]).all() and not (explored == 3).any()
    assert (explored[:, 0] < explored[:, 1]).all()  # distinct, in score order
    assert len(np.unique(explored)) == 7  # a flat draw reaches every rank of the pool


def test_a_cold_draw_takes_the_next_best_and_a_short_row_is_padded():
    ids, scores, keep = _ranked()
    cold = explore_candidates(ids, scores, keep, 4, 2, 1e-3, np.random.default_rng(0))
    assert cold.tolist() == [[0, 1, 2, 4]]
    keep[0, 3:] = False
    assert explore_candidates(ids, scores, keep, 4, 2, 1.0, np.random.default_rng(0)).tolist() == [[0, 1, 2, -1]]


def test_a_batchs_draw_depends_on_its_examples_only():
    ids, scores, keep = _ranked(rows=16)
    draw = [explore_candidates(ids, scores, keep, 4, 2, 10.0, batch_generator(torch.tensor(e))) for e in
            ([1, 2, 3], [1, 2, 3], [4, 5, 6])]  # fmt: skip
    assert torch.equal(draw[0], draw[1]) and not torch.equal(draw[0], draw[2])


def _vector_world():
    """Block 0 is a hub that both queries rank first; each query's own block (1, 2) comes first once centred."""
    store, uids = _store(n=3)
    blocks = torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.2], [0.0, 1.0, 0.2]])
    queries = torch.tensor([[0.6, 0.0, 1.0], [0.0, 0.6, 1.0]])
    return store, BruteForceIndex(blocks), queries


@pytest.mark.parametrize("center, expected", [(False, [0, 0]), (True, [1, 2])])
def test_centred_queries_lose_the_hub_that_every_query_ranks_first(center, expected):
    from realm.pretrain.candidates import retrieve

    store, index, queries = _vector_world()
    cfg = RetrieverConfig(num_candidates=2, num_extra_retrieved=0, center_queries=center)
    batch = retrieve(queries, _batch(["x", "y"]), index, store, SPECIAL, cfg)
    assert batch.candidates.block_ids[:, 1].tolist() == expected


def test_only_the_trainers_search_explores():
    from realm.pretrain.candidates import retrieve

    store, uids = _store(n=12)
    index = BruteForceIndex(torch.eye(12)[:, :12] + torch.linspace(1, 0, 12)[:, None])  # every query: 0, 1, 2, ...
    cfg = RetrieverConfig(num_candidates=4, num_extra_retrieved=1, explore_slots=1, explore_pool=12,
                          explore_temperature=100.0)  # fmt: skip
    queries = torch.ones(16, 12)
    sources = [uids[1]] * 16  # block 1 is every query's source: never a candidate, explored or not
    top = retrieve(queries, _batch(sources), index, store, SPECIAL, cfg).candidates.block_ids
    assert (top[:, 1:] == torch.tensor([0, 2, 3])).all()  # evaluation's search: the top three kept
    explored = retrieve(queries, _batch(sources), index, store, SPECIAL, cfg, explore=True).candidates.block_ids
    assert (explored[:, 1:3] == torch.tensor([0, 2])).all() and (explored[:, 3] != 1).all()
    assert (explored[:, 3] > 3).any()  # some draws go below the top three
    assert uid_hash(uids[1]) != 0


@pytest.mark.parametrize("fields", [{"explore_slots": 3, "num_candidates": 4}, {"explore_slots": 1, "explore_pool": 2},
                                    {"explore_temperature": 0.0}])  # fmt: skip
def test_exploration_settings_that_cannot_work_are_refused(fields):
    with pytest.raises(ValueError, match="explore"):
        RetrieverConfig(**fields)
