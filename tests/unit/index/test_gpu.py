"""FAISS on GPUs (faiss-gpu only; skipped with faiss-cpu): sharded fp16 flat search agrees with exact search, an
IVF-PQ index trained and filled on GPUs is a CPU index any reader loads, and the budget sizes each GPU's shard.

Run on a GPU machine with ``python -m pytest -m gpu tests/unit/test_index_gpu.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from realm.index import versions
from realm.index.budget import expected_index_bytes
from realm.index.gpu import num_gpus
from realm.index.mips import BruteForceIndex, FaissIndex, IndexConfig
from realm.run import publication
from tests.helpers import publish_index

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(num_gpus() == 0, reason="needs faiss-gpu and a GPU (faiss.get_num_gpus() == 0)"),
]


def _clustered(num: int, dim: int, seed: int = 0) -> tuple[np.ndarray, torch.Tensor]:
    """Vectors around 64 centres (PQ and IVF work as on real embeddings) and queries near some of them."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((64, dim)).astype(np.float32)
    data = centres[rng.integers(0, 64, num)] + 0.3 * rng.standard_normal((num, dim)).astype(np.float32)
    queries = data[rng.integers(0, num, 50)] + 0.05 * rng.standard_normal((50, dim)).astype(np.float32)
    return data, torch.from_numpy(queries)


def _recall(ids: torch.Tensor, ref: torch.Tensor) -> float:
    k = ref.shape[1]
    return float(np.mean([len(set(a.tolist()) & set(b.tolist())) / k for a, b in zip(ids, ref)]))


def test_flat_fp16_sharded_over_all_gpus_matches_exact_search(tmp_path):
    data, queries = _clustered(20_000, 64)
    FaissIndex.build(data, IndexConfig()).save(tmp_path / "flat.faiss")
    gpu = FaissIndex.load(tmp_path / "flat.faiss", IndexConfig(enable_gpu_search=True))
    assert gpu.on_gpu and gpu.num_vectors == 20_000
    scores, ids = gpu.search(queries, 10)
    ref_scores, ref_ids = BruteForceIndex(data).search(queries, 10)
    assert _recall(ids, ref_ids) >= 0.95  # fp16 rounding may swap near-ties only
    torch.testing.assert_close(scores, ref_scores, atol=0.05, rtol=0.01)
    gpu.save(tmp_path / "back.faiss")  # saved as a CPU index
    assert FaissIndex.load(tmp_path / "back.faiss").num_vectors == 20_000


def test_ivf_pq_built_on_gpus_loads_on_cpu_and_searches_on_gpus(tmp_path):
    data, queries = _clustered(50_000, 64)
    cfg = IndexConfig(factory="IVF256,PQ16", nprobe=32, train_sample=50_000)
    index = FaissIndex.build(data, cfg)
    assert not index.on_gpu and index.num_vectors == 50_000
    index.save(tmp_path / "ivfpq.faiss")
    cpu = FaissIndex.load(tmp_path / "ivfpq.faiss", cfg)
    _, ref_ids = BruteForceIndex(data).search(queries, 10)
    assert _recall(cpu.search(queries, 10)[1], ref_ids) >= 0.5
    gpu = FaissIndex.load(tmp_path / "ivfpq.faiss", IndexConfig(factory=cfg.factory, nprobe=32, enable_gpu_search=True))
    assert gpu.on_gpu
    assert _recall(gpu.search(queries, 10)[1], cpu.search(queries, 10)[1]) >= 0.8


def test_budget_plans_each_gpus_share_and_the_manifest_records_it(tmp_path):
    data, _ = _clustered(20_000, 64)
    gpus = num_gpus()
    flat_per_gpu = expected_index_bytes("Flat", 20_000, 64, fp16=True, num_shards=gpus)
    cfg = IndexConfig(memory_budget_gb=flat_per_gpu / 2**30, enable_gpu_search=True)
    version = publish_index(tmp_path, data, 1, cfg)
    manifest = publication.read_manifest(version)
    assert manifest["factory"] == "Flat" and manifest["index_devices"] == gpus
    assert manifest["expected_index_bytes"] == flat_per_gpu
    published = versions.load_index_version(version, cfg=cfg)
    assert published.index.on_gpu and published.num_vectors == 20_000
