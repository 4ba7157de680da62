"""Exact search with torch on accelerators, for machines whose FAISS has no GPU support (faiss-cpu wheels; REALM
itself searched by brute force on TPUs).

The embeddings are held as a half-precision matrix split row-wise over ``devices`` (``search_devices``: the GPUs
of the node for a process alone there, its own GPU for one of several);
a search multiplies the queries with each shard a chunk of rows at a time, keeps each chunk's top k, and merges the
per-chunk candidates into the global top k. Memory per device: its rows in fp16/bf16 plus one [Q, chunk] score
block, so 13.35M x 128 embeddings take 3.4 GB on one GPU, 0.43 GB each on eight. Scores are accumulated in fp32
(``torch.matmul`` on fp16 inputs) and returned as float32, best first; ``k`` is clamped to the number of vectors.
Chosen by ``searcher`` (for ``realm.index.versions.load_index_version`` and the kNN-LM datastore's
``load_datastore``) for an exact (Flat) index with ``enable_gpu_search`` when CUDA is available and FAISS reports no
GPU.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from realm.index.gpu import search_gpus
from realm.index.mips import METRICS, FaissIndex, IndexConfig

logger = logging.getLogger(__name__)

_COPY_ROWS = 1 << 18
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


class TorchIndex:
    """Exact inner-product (or negative squared L2) top-k over row shards on ``devices``."""

    def __init__(
        self,
        embeddings: np.ndarray | Tensor,
        devices: list[str | torch.device],
        *,
        dtype: str = "fp16",
        chunk_rows: int = 1 << 20,
        metric: str = "ip",
        factory: str = "Flat",
    ) -> None:
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {sorted(METRICS)}, got {metric!r}")
        if dtype not in DTYPES or not devices or chunk_rows <= 0:
            raise ValueError(f"need a dtype in {sorted(DTYPES)}, at least one device and chunk_rows > 0")
        if embeddings.ndim != 2:
            raise ValueError(f"embeddings must be [N, D], got shape {tuple(embeddings.shape)}")
        self.metric, self.chunk_rows, self.factory = metric, chunk_rows, factory
        num = embeddings.shape[0]
        bounds = np.linspace(0, num, len(devices) + 1).astype(np.int64)
        self.shards: list[tuple[int, Tensor, Tensor | None]] = []
        for device, start, end in zip(devices, bounds[:-1], bounds[1:]):
            rows = torch.empty((int(end - start), embeddings.shape[1]), dtype=DTYPES[dtype], device=device)
            norms = torch.empty(int(end - start), device=device) if metric == "l2" else None
            # note: copied a slice at a time, so a memory-mapped [N, D] file is never held whole in fp32 on the host
            for first in range(int(start), int(end), _COPY_ROWS):
                part = torch.from_numpy(np.array(embeddings[first : min(first + _COPY_ROWS, end)], dtype=np.float32))
                rows[first - start : first - start + len(part)] = part.to(device, DTYPES[dtype])
                if norms is not None:  # note: from the fp32 rows, before the cast
                    norms[first - start : first - start + len(part)] = (part * part).sum(1).to(device)
            self.shards.append((int(start), rows, norms))
        self._num, self._dim = num, embeddings.shape[1]

    @property
    def num_vectors(self) -> int:
        return self._num

    @property
    def dim(self) -> int:
        return self._dim

    def _shard_top(self, queries: Tensor, rows: Tensor, norms: Tensor | None, k: int) -> tuple[Tensor, Tensor]:
        """Top k of one shard, one chunk of rows at a time: ([Q, k'] fp32 scores, [Q, k'] row numbers in the shard)."""
        q = queries.to(rows.device, rows.dtype)
        q_norms = (queries.float() ** 2).sum(1, keepdim=True).to(rows.device) if norms is not None else None
        best_scores, best_ids = [], []
        for start in range(0, rows.shape[0], self.chunk_rows):
            chunk = rows[start : start + self.chunk_rows]
            scores = (q @ chunk.T).float()  # [Q, chunk]
            if norms is not None:
                scores = 2 * scores - norms[start : start + len(chunk)][None, :] - q_norms
            top = scores.topk(min(k, len(chunk)), dim=1)
            best_scores.append(top.values)
            best_ids.append(top.indices + start)
        scores, ids = torch.cat(best_scores, 1), torch.cat(best_ids, 1)
        top = scores.topk(min(k, scores.shape[1]), dim=1)
        return top.values, ids.gather(1, top.indices)

    def search(self, queries: Tensor, k: int) -> tuple[Tensor, Tensor]:
        """[Q, D] -> ([Q, min(k, N)] float32 scores, [Q, min(k, N)] int64 ids), best first, on the queries' device."""
        k = min(k, self._num)
        if k == 0:
            empty = torch.empty((queries.shape[0], 0), device=queries.device)
            return empty, empty.to(torch.int64)
        scores, ids = [], []
        for offset, rows, norms in self.shards:
            if rows.shape[0] == 0:
                continue
            s, i = self._shard_top(queries, rows, norms, k)
            scores.append(s.to(queries.device))
            ids.append(i.to(queries.device) + offset)
        scores_all, ids_all = torch.cat(scores, 1), torch.cat(ids, 1)
        top = scores_all.topk(k, dim=1)
        return top.values, ids_all.gather(1, top.indices)


def search_devices() -> list[str]:
    """The CUDA devices this process's index is placed on (``realm.index.gpu.search_gpus``), or [] without CUDA."""
    return [f"cuda:{i}" for i in search_gpus(torch.cuda.device_count())] if torch.cuda.is_available() else []


def searcher(
    index: FaissIndex, vectors: Callable[[], np.ndarray], cfg: IndexConfig | None, where: Path
) -> FaissIndex | TorchIndex:
    """What searches a loaded ``index``: the index itself (on CPU, or on the GPUs faiss-gpu put it on), or, with
    ``cfg.enable_gpu_search`` where FAISS has no GPU support and CUDA has devices, an exact torch search over
    ``vectors()`` (the same [N, D] rows, memory-mapped) on them. Only for an exact (Flat) index, whose ranking it
    reproduces; an approximate one stays on FAISS's CPU search, and the log says so."""
    devices = search_devices()
    if cfg is None or not cfg.enable_gpu_search or index.on_gpu or not devices:
        return index
    if index.factory != "Flat":
        logger.warning("%s: %s is searched by FAISS on the CPU (no faiss-gpu here; torch search is exact only)",
                       where, index.factory)  # fmt: skip
        return index
    # note: exact search on the GPUs without faiss-gpu: the same ranking as the Flat index, in torch
    logger.info("%s: exact search with torch on %s (FAISS has no GPU support here)", where, ", ".join(devices))
    return TorchIndex(vectors(), devices, metric=index.metric)
