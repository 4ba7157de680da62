"""Maximum inner-product search (MIPS) over block embeddings, behind one small Protocol.

``BruteForceIndex`` is exact torch matmul + top-k: the reference the tests compare against and a fine choice for
small corpora. ``FaissIndex`` wraps any FAISS factory string: ``"Flat"`` is exact, ``"HNSW32"`` and
``"IVF{n},PQ{m}"`` trade recall for speed and memory at the 13M-block scale of REALM. Both return scores best first,
and clamp ``k`` to the number of indexed vectors (so the result has ``min(k, N)`` columns).

The metric is inner product (REALM's MIPS) or squared L2 (kNN-LM's default, ``metric="l2"``); with L2 the score is
the *negative* squared distance, so "higher is better" and "best first" hold for both.

With faiss-gpu (``faiss.get_num_gpus() > 0``), IVF indexes train and fill on the GPUs and a loaded index can be
searched sharded over the GPUs (``realm/index/gpu.py``); ``memory_budget_gb`` chooses between exact and compressed
(``realm/index/budget.py``). With faiss-cpu nothing of that runs and the CPU path is unchanged.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import faiss
import numpy as np
import torch
from torch import Tensor

from realm.core.atomic import disk_writes
from realm.core.checks import Problems
from realm.index import gpu as index_gpu

logger = logging.getLogger(__name__)

# note: a probe dimension for validating factory strings before the real dimension is known; 960 = 2^6 * 3 * 5 is
# divisible by every usual PQ sub-quantizer count (1..64), so a valid "IVF..,PQm" string is not rejected early.
_PROBE_DIM = 960
# how many rows go to faiss per add() call: bounds the float32 copy made from a memory-mapped embeddings file.
_ADD_CHUNK = 1 << 16
METRICS = {"ip": faiss.METRIC_INNER_PRODUCT, "l2": faiss.METRIC_L2}


@runtime_checkable
class DocumentIndex(Protocol):
    """What retrieval needs from an index: a size and a best-first top-k search by inner product."""

    @property
    def num_vectors(self) -> int: ...

    def search(self, queries: Tensor, k: int) -> tuple[Tensor, Tensor]:
        """[Q, D] queries -> ([Q, min(k, N)] float32 scores, [Q, min(k, N)] int64 ids), best first."""
        ...


def centered_queries(queries: Tensor) -> Tensor:
    """[B, D] float32 CPU queries less their batch mean: the hubness correction of a search (a block that scores high
    for every query loses that lead). A batch of one is returned as it is, since centring would zero it."""
    queries = queries.detach().float().cpu()
    return queries - queries.mean(dim=0, keepdim=True) if queries.shape[0] > 1 else queries


@dataclass(kw_only=True, slots=True)
class IndexConfig:
    """Which FAISS index the builder makes and how the trainer searches it."""

    factory: str = "Flat"
    """FAISS factory string: "Flat" (exact), "HNSW32", "IVF4096,PQ32", ..."""
    metric: str = "ip"
    """"ip" (inner product: REALM's document index, which requires it) or "l2" (squared L2, searched as its
    negative: the kNN-LM datastore's default)."""
    nprobe: int = 32
    """Inverted lists visited per query by IVF indexes (ignored by the others)."""
    ef_search: int = 128
    """Size of the HNSW candidate list at search time (ignored by non-HNSW indexes)."""
    train_sample: int = 262_144
    """Vectors sampled to train indexes that need training (IVF, PQ); the whole corpus when it is smaller."""
    seed: int = 0
    """Seed of the training sample, so a rebuild from the same embeddings gives the same index."""
    memory_budget_gb: float = 0.0
    """Memory the index may take on each device holding it (CPU RAM, or each GPU's shard with
    ``enable_gpu_search``, planned as one searching process per node; with one per GPU each GPU holds a whole copy,
    so budget for that); 0 builds ``factory`` as given. When set, the builder keeps exact ``Flat`` if it fits and
    otherwise builds the finest ``IVF{n},PQ{m}`` that does, ignoring ``factory``; the choice and its expected size
    are logged and recorded in the manifest (``expected_index_bytes``)."""
    enable_gpu: bool = True
    """Train and fill IVF indexes on the GPUs when faiss-gpu reports any (the published index is a CPU index)."""
    enable_gpu_search: bool = False
    """Search a loaded index on GPUs, flat in fp16: sharded over every GPU of the node when the loading process is
    alone there, a whole copy on its own GPU when the node runs several (``realm.index.gpu.search_gpus``). Through
    faiss-gpu; where FAISS has no GPU support (faiss-cpu) and CUDA is available, an exact (Flat) index is searched
    with torch instead (``realm.index.torch_search``). Off by default: each GPU then holds a copy of the index
    (3.4 GB for REALM's 13.35M blocks) beside training."""

    def __post_init__(self) -> None:
        problems = Problems()
        if self.nprobe <= 0:
            problems.add(f"nprobe must be positive, got {self.nprobe}")
        if self.ef_search <= 0:
            problems.add(f"ef_search must be positive, got {self.ef_search}")
        if self.train_sample <= 0:
            problems.add(f"train_sample must be positive, got {self.train_sample}")
        if self.memory_budget_gb < 0:
            problems.add(f"memory_budget_gb must be >= 0 (0 = no budget), got {self.memory_budget_gb}")
        if self.metric not in METRICS:
            problems.add(f"metric must be one of {sorted(METRICS)}, got {self.metric!r}")
        problems.check(check_factory, self.factory)
        problems.raise_if_any()


def _faiss_message(err: Exception) -> str:
    """The useful last line of a FAISS C++ exception, without the "Error in <signature> at file:line:" prefix."""
    lines = str(err).strip().splitlines() or [repr(err)]
    return re.sub(r"^Error in .*? at \S+:\d+: ", "", lines[-1]).strip()


def check_factory(factory: str, dim: int | None = None) -> None:
    """Raises ``ValueError`` naming ``factory`` when FAISS cannot build it (at ``dim``, or a probe dimension)."""
    if not factory or not factory.strip():
        raise ValueError("index factory string is empty; use e.g. 'Flat', 'HNSW32' or 'IVF4096,PQ32'")
    try:
        faiss.index_factory(dim or _PROBE_DIM, factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as err:
        where = f" for dimension {dim}" if dim else ""
        raise ValueError(f"invalid FAISS factory string {factory!r}{where}: {_faiss_message(err)}") from None


def _ivf_of(index: faiss.Index) -> faiss.IndexIVF | None:
    """The IVF part of ``index`` (through pre-transforms), or None when it is not an IVF index."""
    try:
        return faiss.extract_index_ivf(index)
    except RuntimeError:
        return None


def _skip_polysemous_training(index: faiss.Index) -> None:
    """FAISS trains 8-bit PQ codes for polysemous (Hamming-filtered) search by default: ~30 s of annealing per build
    that only reorders the codes, and we never search in Hamming space, so results are the same without it."""
    ivf = _ivf_of(index)
    inner = faiss.downcast_index(ivf if ivf is not None else index)
    if hasattr(inner, "do_polysemous_training"):
        inner.do_polysemous_training = False


def _as_numpy_queries(queries: Tensor) -> np.ndarray:
    return np.ascontiguousarray(queries.detach().to("cpu", torch.float32).numpy())


class BruteForceIndex:
    """Exact search by a matmul over all embeddings (inner product, or negative squared L2); results are on the
    queries' device."""

    def __init__(self, embeddings: Tensor | np.ndarray, metric: str = "ip") -> None:
        """``embeddings``: [N, D]; row i is block i. A numpy array (or memmap) is copied into memory."""
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {sorted(METRICS)}, got {metric!r}")
        self.metric = metric
        if isinstance(embeddings, np.ndarray):
            # note: copied, because a read-only memmap cannot back a tensor
            embeddings = torch.from_numpy(np.array(embeddings, dtype=np.float32))
        if embeddings.ndim != 2:
            raise ValueError(f"embeddings must be [N, D], got shape {tuple(embeddings.shape)}")
        self.embeddings = embeddings

    @property
    def num_vectors(self) -> int:
        return self.embeddings.shape[0]

    def search(self, queries: Tensor, k: int) -> tuple[Tensor, Tensor]:
        """[Q, D] -> ([Q, min(k, N)] float32 scores, [Q, min(k, N)] int64 ids), best first."""
        k = min(k, self.num_vectors)
        queries_here = queries.to(self.embeddings.device, self.embeddings.dtype)
        scores = queries_here @ self.embeddings.T  # [Q, N]
        if self.metric == "l2":  # note: -|q - e|^2 = 2 q.e - |q|^2 - |e|^2
            norms = (self.embeddings * self.embeddings).sum(1)
            scores = 2 * scores - norms[None, :] - (queries_here * queries_here).sum(1, keepdim=True)
        top, ids = scores.topk(k, dim=1)
        return top.float().to(queries.device), ids.to(queries.device, torch.int64)


class FaissIndex:
    """A FAISS index (inner product or L2); saved with FAISS's own serialisation (never pickle)."""

    def __init__(self, index: faiss.Index, factory: str, on_gpu: bool = False) -> None:
        by_code = {code: name for name, code in METRICS.items()}
        if index.metric_type not in by_code:
            raise ValueError(f"FaissIndex needs inner-product or L2 metric, got metric {index.metric_type}")
        self.metric = by_code[index.metric_type]
        self.index = index
        self.factory = factory
        self.on_gpu = on_gpu

    @classmethod
    def build(cls, embeddings: np.ndarray, cfg: IndexConfig) -> "FaissIndex":
        """Builds from [N, D] float32 ``embeddings`` (an in-memory array or a read-only memmap).

        Indexes that need training are trained on ``cfg.train_sample`` rows drawn without replacement; rows are
        added in chunks so a memory-mapped input is never copied whole into RAM.
        """
        if embeddings.ndim != 2:
            raise ValueError(f"embeddings must be [N, D], got shape {embeddings.shape}")
        num, dim = embeddings.shape
        check_factory(cfg.factory, dim)
        index = faiss.index_factory(dim, cfg.factory, METRICS[cfg.metric])
        _skip_polysemous_training(index)
        # note: only IVF gains from GPUs here (k-means, assignment); a flat add is a memcpy, HNSW has no GPU form
        gpus = cfg.enable_gpu and index_gpu.num_gpus() > 0 and _ivf_of(index) is not None
        if not index.is_trained:
            if num > cfg.train_sample:
                rows = np.sort(np.random.default_rng(cfg.seed).choice(num, cfg.train_sample, replace=False))
                sample = np.ascontiguousarray(embeddings[rows], dtype=np.float32)
            else:
                sample = np.ascontiguousarray(embeddings, dtype=np.float32)
            try:
                if gpus:
                    index_gpu.train_on_gpus(index, sample)
                else:
                    index.train(sample)
            except RuntimeError as err:
                raise ValueError(
                    f"FAISS could not train {cfg.factory!r} on {len(sample)} vectors: {_faiss_message(err)}; "
                    "use fewer lists / sub-quantizers, or 'Flat' for a small corpus"
                ) from None
        if gpus:
            index = index_gpu.add_on_gpu(index, embeddings, _ADD_CHUNK)
        else:
            for start in range(0, num, _ADD_CHUNK):
                index.add(np.ascontiguousarray(embeddings[start : start + _ADD_CHUNK], dtype=np.float32))
        out = cls(index, cfg.factory)
        out.configure(cfg)
        return out

    @classmethod
    def load(cls, path: str | Path, cfg: IndexConfig | None = None) -> "FaissIndex":
        """Reads an index written by ``save``; ``cfg`` (if given) sets its search parameters, and with
        ``cfg.enable_gpu_search`` and faiss-gpu the index is searched on the GPUs ``index_gpu.search_gpus`` picks."""
        index = faiss.read_index(str(path))
        on_gpu = cfg is not None and cfg.enable_gpu_search and index_gpu.num_gpus() > 0
        if on_gpu:
            try:
                index = index_gpu.to_gpus(index, index_gpu.search_gpus(index_gpu.num_gpus()))
            except RuntimeError as err:  # note: e.g. HNSW has no GPU form; searching on CPU still works
                logger.warning("cannot search %s on GPUs (%s); searching on CPU", path, _faiss_message(err))
                on_gpu = False
        out = cls(index, cfg.factory if cfg else "", on_gpu=on_gpu)
        if cfg is not None:
            out.configure(cfg)
        return out

    def reconstruct(self, ids: np.ndarray) -> np.ndarray:
        """[n, D] float32: the vectors the index holds for ``ids`` as it stores them (decoded from their codes for a
        compressed index such as IVF-PQ, so scoring a query against them gives the index's own approximate scores)."""
        if self.on_gpu:
            raise ValueError("reconstruct reads a CPU index; this one is searched on GPUs")
        ivf = self._get_ivf()
        if ivf is not None and ivf.direct_map.type == faiss.DirectMap.NoMap:
            ivf.make_direct_map()  # note: IVF lists are searched by list, so an id -> code map is built on first use
        return self.index.reconstruct_batch(np.ascontiguousarray(ids, dtype=np.int64))

    def save(self, path: str | Path) -> None:
        """Writes the index to ``path``; a full or read-only disk is a ``DiskError`` (faiss names it only in text)."""
        with disk_writes(path):
            faiss.write_index(index_gpu.to_cpu(self.index) if self.on_gpu else self.index, str(path))

    @property
    def num_vectors(self) -> int:
        return int(self.index.ntotal)

    @property
    def dim(self) -> int:
        return int(self.index.d)

    def _set(self, name: str, value: int) -> None:
        try:
            index_gpu.parameter_space(self.on_gpu).set_index_parameter(self.index, name, value)
        except RuntimeError:
            raise ValueError(f"index {self.factory or type(self.index).__name__} has no parameter {name!r}") from None

    def _get_ivf(self) -> faiss.IndexIVF | None:
        return _ivf_of(self.index)

    @property
    def nprobe(self) -> int | None:
        """Lists visited per query, or None when the index is not IVF."""
        ivf = self._get_ivf()
        return None if ivf is None else int(ivf.nprobe)

    @nprobe.setter
    def nprobe(self, value: int) -> None:
        self._set("nprobe", value)

    @property
    def ef_search(self) -> int | None:
        """HNSW search-time candidate list size, or None when the index is not HNSW."""
        hnsw = getattr(faiss.downcast_index(self.index), "hnsw", None)
        return None if hnsw is None else int(hnsw.efSearch)

    @ef_search.setter
    def ef_search(self, value: int) -> None:
        self._set("efSearch", value)

    def configure(self, cfg: IndexConfig) -> None:
        """Applies the search parameters of ``cfg`` that this kind of index has."""
        for name, value in (("nprobe", cfg.nprobe), ("efSearch", cfg.ef_search)):
            try:
                self._set(name, value)
            except ValueError:
                pass  # note: this kind of index has no such knob (e.g. nprobe on HNSW), which is fine here

    def search(self, queries: Tensor, k: int) -> tuple[Tensor, Tensor]:
        """[Q, D] -> ([Q, min(k, N)] float32 scores, [Q, min(k, N)] int64 ids), best first, on the queries' device.

        Approximate indexes can find fewer than k neighbours (e.g. IVF with a small nprobe); those slots hold id -1
        and score -inf, so callers that filter candidates must drop negative ids.
        """
        k = min(k, self.num_vectors)
        if k == 0:
            empty = torch.empty((queries.shape[0], 0), device=queries.device)
            return empty, empty.to(torch.int64)
        scores, ids = self.index.search(_as_numpy_queries(queries), k)
        if self.metric == "l2":
            scores = -scores  # note: FAISS returns squared distances, nearest first
        scores[ids < 0] = -np.inf
        return torch.from_numpy(scores).to(queries.device), torch.from_numpy(ids).to(queries.device)
