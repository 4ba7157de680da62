"""How much memory a FAISS index takes, and which index fits a memory budget.

REALM's 13.35M x 128 block embeddings are 6.8 GB as an exact fp32 ``Flat`` index (3.4 GB in fp16 on GPUs, split over
the GPUs when sharded); an ``IVF{n},PQ{m}`` index stores ``m`` bytes + an 8-byte id per vector instead. With
``IndexConfig.memory_budget_gb`` set, ``plan_index`` keeps the exact index when it fits on each device that will hold
it and otherwise picks the finest IVF-PQ that does, so a run states (log line and manifest) what its index will cost
before building it. The arithmetic is plain counting of stored bytes (FAISS's own bookkeeping adds a little).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from realm.index.mips import IndexConfig

GB = 1 << 30
# note: FAISS stores one int64 id per vector in every inverted list
_ID_BYTES = 8
_FLOAT_BYTES = 4
# PQ sub-quantizer counts GPU IVF-PQ supports (faiss/gpu/GpuIndexIVFPQ), finest first; restricting the choice to them
# keeps a planned index clonable to GPUs. 8-bit codes, so m bytes a vector.
_PQ_CHOICES = (96, 64, 56, 48, 40, 32, 28, 24, 20, 16, 12, 8, 4, 2, 1)
# FAISS warns below 39 training points per centroid; 8-bit PQ needs >= 256 points for its own k-means.
_MIN_POINTS_PER_LIST = 39
_MIN_PQ_TRAIN = 256

_FLAT = re.compile(r"^Flat$")
_IVF = re.compile(r"^IVF(\d+),(Flat|PQ(\d+)(?:x(\d+))?)$")
_PQ = re.compile(r"^PQ(\d+)(?:x(\d+))?$")
_HNSW = re.compile(r"^HNSW(\d+)(?:,Flat)?$")


def expected_index_bytes(factory: str, num: int, dim: int, *, fp16: bool = False, num_shards: int = 1) -> int | None:
    """Bytes an index takes on each of ``num_shards`` devices holding an equal share of its vectors.

    Per-vector storage is split over the shards; centroids and codebooks are replicated on each. ``fp16`` halves
    stored full vectors (GPU flat with ``useFloat16``). Returns None for factory strings not modelled here
    (pre-transforms, refinements, ...).
    """
    if num_shards < 1:
        raise ValueError(f"num_shards must be >= 1, got {num_shards}")
    per_shard = math.ceil(num / num_shards)
    vector_bytes = dim * (2 if fp16 else _FLOAT_BYTES)
    factory = factory.replace(" ", "")
    if _FLAT.match(factory):
        return per_shard * vector_bytes
    if match := _HNSW.match(factory):
        # note: level 0 keeps 2M int32 links a node; upper levels, levels and offsets add about 16 bytes more
        return per_shard * (vector_bytes + 2 * int(match[1]) * 4 + 16)
    if match := _PQ.match(factory):
        m, bits = int(match[1]), int(match[2] or 8)
        return per_shard * math.ceil(m * bits / 8) + (1 << bits) * dim * _FLOAT_BYTES
    if match := _IVF.match(factory):
        nlist = int(match[1])
        centroids = nlist * dim * _FLOAT_BYTES
        if match[2] == "Flat":
            return per_shard * (vector_bytes + _ID_BYTES) + centroids
        m, bits = int(match[3]), int(match[4] or 8)
        codebooks = (1 << bits) * dim * _FLOAT_BYTES
        return per_shard * (math.ceil(m * bits / 8) + _ID_BYTES) + centroids + codebooks
    return None


def ivf_lists(num: int, train_sample: int) -> int:
    """Inverted lists for ``num`` vectors: the power of two nearest 4 sqrt(N) (FAISS's guideline is 4-16 sqrt(N)),
    capped so each centroid gets >= 39 of the ``min(num, train_sample)`` training vectors."""
    cap = max(1, min(num, train_sample) // _MIN_POINTS_PER_LIST)
    target = 2 ** round(math.log2(max(1.0, 4 * math.sqrt(num))))
    return int(min(target, 2 ** int(math.log2(cap))))


@dataclass(frozen=True, slots=True)
class IndexPlan:
    """The index a build will make and what it is expected to cost on each device that holds it."""

    factory: str
    """FAISS factory string to build."""
    expected_bytes: int | None
    """Expected bytes on each device holding the index (None: a factory string not modelled)."""
    num_devices: int
    """Devices the index is split over when searched: 1 (CPU RAM) or the number of GPUs (sharded)."""
    fp16: bool
    """Whether full vectors are stored in fp16 (GPU flat)."""
    budget_gb: float
    """The memory budget per device it was planned for (0 = none: the configured factory as is)."""
    reason: str
    """Why this factory, in words, for the log."""

    def describe(self) -> str:
        size = "unknown size" if self.expected_bytes is None else f"{self.expected_bytes / GB:.3f} GB"
        where = "CPU RAM" if self.num_devices == 1 and not self.fp16 else f"each of {self.num_devices} GPU(s)"
        return f"index {self.factory}: expected {size} on {where}{' (fp16)' if self.fp16 else ''}; {self.reason}"

    def manifest_fields(self) -> dict[str, Any]:
        """What the published manifest records about the plan."""
        return {
            "expected_index_bytes": self.expected_bytes,
            "index_devices": self.num_devices,
            "memory_budget_gb": self.budget_gb,
        }


def plan_index(num: int, dim: int, cfg: IndexConfig, num_gpus: int = 0) -> IndexPlan:
    """Chooses the factory for ``num`` x ``dim`` embeddings under ``cfg.memory_budget_gb`` (per device).

    Without a budget the configured factory is kept. With one, the index is sized where it will be searched: sharded
    over ``num_gpus`` GPUs (flat in fp16) when ``cfg.enable_gpu_search`` and GPUs exist, else in CPU RAM (fp32). Flat
    (exact) is kept when it fits; otherwise the IVF-PQ with the most sub-quantizers (best recall) that fits. Raises
    ``ValueError`` when nothing fits, naming the smallest size possible.
    """
    on_gpus = cfg.enable_gpu_search and num_gpus > 0
    shards, fp16 = (num_gpus, True) if on_gpus else (1, False)
    budget = cfg.memory_budget_gb
    if budget <= 0:
        size = expected_index_bytes(cfg.factory, num, dim, fp16=fp16 and cfg.factory == "Flat", num_shards=shards)
        return IndexPlan(cfg.factory, size, shards, fp16 and cfg.factory == "Flat", 0.0, "configured factory")
    limit = budget * GB
    flat = expected_index_bytes("Flat", num, dim, fp16=fp16, num_shards=shards)
    if flat <= limit:
        return IndexPlan("Flat", flat, shards, fp16, budget, f"exact search fits the {budget:g} GB budget")
    nlist = ivf_lists(num, cfg.train_sample)
    fits = [m for m in _PQ_CHOICES if dim % m == 0]
    smallest = None
    for m in fits:
        factory = f"IVF{nlist},PQ{m}"
        size = expected_index_bytes(factory, num, dim, num_shards=shards)
        smallest = size if smallest is None else min(smallest, size)
        if size <= limit:
            if min(num, cfg.train_sample) < max(_MIN_PQ_TRAIN, nlist):
                break  # note: too few vectors to train PQ codebooks; reported below
            reason = f"Flat needs {flat / GB:.3f} GB > {budget:g} GB; {m} PQ bytes a vector fit"
            return IndexPlan(factory, size, shards, False, budget, reason)
    raise ValueError(
        f"no index for {num} x {dim} embeddings fits memory_budget_gb={budget:g} per device: Flat needs "
        f"{flat / GB:.3f} GB, the smallest IVF-PQ {0 if smallest is None else smallest / GB:.3f} GB "
        f"(and IVF-PQ needs >= {_MIN_PQ_TRAIN} training vectors); raise the budget"
    )
