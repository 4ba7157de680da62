"""Index memory arithmetic and the budget's choice between exact and compressed (CPU; the GPU side is sizing only)."""

from __future__ import annotations

import numpy as np
import pytest

from realm.index import versions
from realm.index.budget import GB, expected_index_bytes, ivf_lists, plan_index
from realm.index.mips import IndexConfig
from realm.run import publication
from tests.helpers import publish_index

REALM_BLOCKS, DIM = 13_353_718, 128


def test_expected_bytes_of_the_usual_factories():
    n = REALM_BLOCKS
    assert expected_index_bytes("Flat", n, DIM) == n * 512  # 6.8 GB, the paper's figure
    assert round(expected_index_bytes("Flat", n, DIM) / 1e9, 1) == 6.8
    assert expected_index_bytes("Flat", n, DIM, fp16=True, num_shards=8) == -(-n // 8) * 256
    assert expected_index_bytes("IVF4096,PQ32", n, DIM) == n * (32 + 8) + 4096 * DIM * 4 + 256 * DIM * 4
    assert expected_index_bytes("IVF1024,Flat", 1000, 8) == 1000 * (32 + 8) + 1024 * 32
    assert expected_index_bytes("HNSW32", 1000, 8) == 1000 * (32 + 256 + 16)
    assert expected_index_bytes("OPQ16,IVF256,PQ16", 1000, 8) is None  # not modelled: reported as unknown


def test_ivf_lists_follow_sqrt_n_and_the_training_sample():
    assert ivf_lists(REALM_BLOCKS, 262_144) == 4096  # 4 sqrt(N) ~ 14.6k, capped by 262k / 39 training points
    assert ivf_lists(REALM_BLOCKS, 10_000_000) == 16384
    assert ivf_lists(10_000, 262_144) == 256
    assert ivf_lists(10, 262_144) == 1


def test_without_a_budget_the_configured_factory_is_kept_and_sized():
    plan = plan_index(REALM_BLOCKS, DIM, IndexConfig(factory="HNSW32"))
    assert plan.factory == "HNSW32" and plan.budget_gb == 0
    assert plan.expected_bytes == expected_index_bytes("HNSW32", REALM_BLOCKS, DIM)
    assert "HNSW32: expected" in plan.describe() and "CPU RAM" in plan.describe()


def test_budget_keeps_flat_when_it_fits_else_the_finest_ivf_pq_that_fits():
    assert plan_index(REALM_BLOCKS, DIM, IndexConfig(memory_budget_gb=8)).factory == "Flat"
    one_gb = plan_index(REALM_BLOCKS, DIM, IndexConfig(memory_budget_gb=1))
    assert one_gb.factory == "IVF4096,PQ64" and one_gb.expected_bytes <= GB  # 72 bytes a vector
    # 24, 20 and 28 sub-quantizers do not divide 128, so 0.4 GB falls back to 16
    assert plan_index(REALM_BLOCKS, DIM, IndexConfig(memory_budget_gb=0.4)).factory == "IVF4096,PQ16"
    fields = one_gb.manifest_fields()
    assert fields == {"expected_index_bytes": one_gb.expected_bytes, "index_devices": 1, "memory_budget_gb": 1}


def test_budget_counts_each_gpus_fp16_shard_when_searched_on_gpus():
    cfg = IndexConfig(memory_budget_gb=1, enable_gpu_search=True)
    plan = plan_index(REALM_BLOCKS, DIM, cfg, num_gpus=8)
    assert plan.factory == "Flat" and plan.fp16 and plan.num_devices == 8
    assert plan.expected_bytes == -(-REALM_BLOCKS // 8) * DIM * 2  # 0.43 GB on each GPU
    assert "each of 8 GPU(s) (fp16)" in plan.describe()
    assert plan_index(REALM_BLOCKS, DIM, cfg, num_gpus=0).factory.startswith("IVF")  # no GPUs: CPU RAM, fp32


def test_budget_too_small_for_any_index_is_a_clear_error():
    with pytest.raises(ValueError, match="no index for 13353718 x 128 .* memory_budget_gb=0.01"):
        plan_index(REALM_BLOCKS, DIM, IndexConfig(memory_budget_gb=0.01))
    with pytest.raises(ValueError, match="memory_budget_gb must be >= 0"):
        IndexConfig(memory_budget_gb=-1)


def test_published_manifest_states_the_chosen_index_and_its_expected_size(tmp_path):
    rng = np.random.default_rng(0)
    embeddings = rng.standard_normal((10_000, 16)).astype(np.float32)
    budget_gb = 170_000 / GB  # Flat needs 640 kB, IVF256,PQ8 193 kB, IVF256,PQ4 153 kB
    cfg = IndexConfig(memory_budget_gb=budget_gb, train_sample=10_000)
    version = publish_index(tmp_path, embeddings, 1, cfg)
    manifest = publication.read_manifest(version)
    assert manifest["factory"] == "IVF256,PQ4" and manifest["memory_budget_gb"] == budget_gb
    expected = manifest["expected_index_bytes"]
    assert expected == expected_index_bytes("IVF256,PQ4", 10_000, 16) <= budget_gb * GB
    assert 0.5 < manifest["files"][versions.FAISS_FILE]["size"] / expected < 1.5  # the arithmetic matches FAISS's file
    published = versions.load_index_version(version, cfg=cfg)
    assert published.num_vectors == 10_000 and published.index.nprobe == cfg.nprobe
