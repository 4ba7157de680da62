"""Exact search in torch (for accelerators without faiss-gpu): the same neighbours as exact FAISS, through chunks and
row shards, for inner product and L2; chosen by the loader only when asked for GPU search and FAISS has no GPU;
placed on every GPU of the node for a process alone there, on its own GPU for one of several."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from realm.index import gpu, torch_search, versions
from realm.index.mips import FaissIndex, IndexConfig
from tests.unit.run.test_publication import publish_random


@pytest.mark.parametrize("metric", ["ip", "l2"])
@pytest.mark.parametrize("devices,chunk_rows", [(["cpu"], 1 << 20), (["cpu", "cpu", "cpu"], 37)])
def test_same_neighbours_as_exact_faiss(metric, devices, chunk_rows):
    rng = np.random.default_rng(0)
    embeddings = rng.standard_normal((500, 16)).astype(np.float32)
    queries = torch.from_numpy(rng.standard_normal((9, 16)).astype(np.float32))
    exact = FaissIndex.build(embeddings, IndexConfig(factory="Flat", metric=metric))
    index = torch_search.TorchIndex(embeddings, devices, dtype="fp32", chunk_rows=chunk_rows, metric=metric)
    want_scores, want_ids = exact.search(queries, 20)
    got_scores, got_ids = index.search(queries, 20)
    assert torch.equal(got_ids, want_ids)
    torch.testing.assert_close(got_scores, want_scores, atol=1e-3, rtol=1e-4)
    assert index.search(queries, 10_000)[1].shape == (9, 500)  # k clamped to N


def test_half_precision_keeps_the_ranking_up_to_rounding():
    rng = np.random.default_rng(1)
    embeddings = rng.standard_normal((300, 32)).astype(np.float32)
    queries = torch.from_numpy(embeddings[:5])
    _, ids = torch_search.TorchIndex(embeddings, ["cpu", "cpu"], dtype="bf16", chunk_rows=64).search(queries, 1)
    assert ids[:, 0].tolist() == [0, 1, 2, 3, 4]  # each vector's best inner product is itself here


def test_the_loader_chooses_torch_only_for_gpu_search_without_faiss_gpu(tmp_path, monkeypatch):
    version = publish_random(tmp_path, 3, num=40)
    monkeypatch.setattr(torch_search, "search_devices", lambda: ["cpu", "cpu"])  # stands in for 2 GPUs
    faiss_only = versions.load_index_version(version, cfg=IndexConfig())
    on_torch = versions.load_index_version(version, cfg=IndexConfig(enable_gpu_search=True))
    assert type(faiss_only.index).__name__ == "FaissIndex" and isinstance(on_torch.index, torch_search.TorchIndex)
    queries = torch.from_numpy(faiss_only.embeddings()[:4].copy())
    assert torch.equal(on_torch.search(queries, 5)[1], faiss_only.search(queries, 5)[1])  # block ids, same order
    monkeypatch.setattr(torch_search, "search_devices", lambda: [])  # no CUDA: FAISS on the CPU
    assert type(versions.load_index_version(version, cfg=IndexConfig(enable_gpu_search=True)).index).__name__ == (
        "FaissIndex"
    )


@pytest.mark.parametrize(
    "env,count,want",
    [
        ({}, 4, [0, 1, 2, 3]),  # not launched: alone on the node, sharded over every GPU
        ({"LOCAL_WORLD_SIZE": "1", "LOCAL_RANK": "0"}, 4, [0, 1, 2, 3]),  # one trainer process, builder beside it
        ({"LOCAL_WORLD_SIZE": "4", "LOCAL_RANK": "2"}, 4, [2]),  # one process per GPU: its own
        ({"LOCAL_WORLD_SIZE": "8", "LOCAL_RANK": "5"}, 1, [0]),  # a launcher that shows each process its GPU only
        ({"LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "1"}, 0, []),  # no GPU
    ],
)
def test_each_of_several_processes_on_a_node_searches_on_its_own_gpu(monkeypatch, env, count, want):
    for name in ("LOCAL_WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert gpu.search_gpus(count) == want
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    assert torch_search.search_devices() == [f"cuda:{i}" for i in want]
