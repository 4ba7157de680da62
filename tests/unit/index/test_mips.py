"""MIPS indexes: FAISS agrees with the exact brute-force reference, round-trips through disk, fails clearly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from realm.index.mips import BruteForceIndex, DocumentIndex, FaissIndex, IndexConfig, check_factory


@pytest.fixture()
def vectors() -> tuple[np.ndarray, torch.Tensor]:
    rng = np.random.default_rng(0)
    embeddings = rng.standard_normal((200, 32)).astype(np.float32)
    queries = torch.from_numpy(rng.standard_normal((20, 32)).astype(np.float32))
    return embeddings, queries


def test_flat_faiss_matches_brute_force(vectors):
    embeddings, queries = vectors
    exact = BruteForceIndex(torch.from_numpy(embeddings))
    flat = FaissIndex.build(embeddings, IndexConfig(factory="Flat"))
    scores, ids = flat.search(queries, 10)
    ref_scores, ref_ids = exact.search(queries, 10)
    assert ids.dtype == torch.int64 and scores.dtype == torch.float32 and ids.shape == (20, 10)
    assert torch.equal(ids, ref_ids)
    torch.testing.assert_close(scores, ref_scores, atol=1e-4, rtol=1e-5)
    assert bool((scores[:, :-1] >= scores[:, 1:]).all()), "best first"


def test_both_implement_the_protocol(vectors):
    embeddings, _ = vectors
    assert isinstance(BruteForceIndex(torch.from_numpy(embeddings)), DocumentIndex)
    assert isinstance(FaissIndex.build(embeddings, IndexConfig()), DocumentIndex)


def test_hnsw_recall_is_high(vectors):
    embeddings, queries = vectors
    _, ref_ids = BruteForceIndex(torch.from_numpy(embeddings)).search(queries, 10)
    hnsw = FaissIndex.build(embeddings, IndexConfig(factory="HNSW32", ef_search=64))
    assert hnsw.ef_search == 64 and hnsw.nprobe is None
    _, ids = hnsw.search(queries, 10)
    recall = np.mean([len(set(a.tolist()) & set(b.tolist())) / 10 for a, b in zip(ids, ref_ids)])
    assert recall >= 0.9


def test_ivf_index_is_trained_and_nprobe_settable(vectors):
    embeddings, queries = vectors
    ivf = FaissIndex.build(embeddings, IndexConfig(factory="IVF4,Flat", nprobe=4, train_sample=100))
    assert ivf.nprobe == 4 and ivf.num_vectors == 200
    # nprobe = number of lists is exhaustive, so it is exact
    _, ref_ids = BruteForceIndex(torch.from_numpy(embeddings)).search(queries, 5)
    assert torch.equal(ivf.search(queries, 5)[1], ref_ids)
    ivf.nprobe = 1
    assert ivf.nprobe == 1
    with pytest.raises(ValueError, match="efSearch"):
        ivf.ef_search = 10


def test_save_load_round_trip(vectors, tmp_path):
    embeddings, queries = vectors
    index = FaissIndex.build(embeddings, IndexConfig(factory="HNSW32"))
    index.save(tmp_path / "index.faiss")
    loaded = FaissIndex.load(tmp_path / "index.faiss", IndexConfig(factory="HNSW32", ef_search=200))
    assert loaded.num_vectors == 200 and loaded.dim == 32 and loaded.ef_search == 200
    for a, b in zip(index.search(queries, 7), loaded.search(queries, 7)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("factory", ["Bogus12", "", "IVF4,PQ7x"])
def test_bad_factory_string_is_a_clear_error(factory):
    with pytest.raises(ValueError, match="factory"):
        IndexConfig(factory=factory)


def test_factory_that_does_not_fit_the_dimension_is_a_clear_error(vectors):
    embeddings, _ = vectors
    with pytest.raises(ValueError, match="IVF4,PQ5.*dimension 32"):
        check_factory("IVF4,PQ5", 32)
    with pytest.raises(ValueError, match="could not train"):
        FaissIndex.build(embeddings, IndexConfig(factory="IVF4,PQ8"))  # 8-bit PQ needs >= 256 training vectors


def test_k_is_clamped_to_the_number_of_vectors(vectors):
    embeddings, queries = vectors
    small = embeddings[:5]
    for index in (BruteForceIndex(torch.from_numpy(small)), FaissIndex.build(small, IndexConfig())):
        scores, ids = index.search(queries, 50)
        assert scores.shape == ids.shape == (20, 5)
        assert sorted(ids[0].tolist()) == [0, 1, 2, 3, 4]


def test_missing_results_of_an_approximate_index_are_minus_one(vectors):
    embeddings, queries = vectors
    ivf = FaissIndex.build(embeddings, IndexConfig(factory="IVF8,Flat", nprobe=1))
    scores, ids = ivf.search(queries, 200)  # one list of eight cannot hold all 200 vectors
    assert bool((ids == -1).any())
    assert bool(torch.isneginf(scores[ids == -1]).all())
