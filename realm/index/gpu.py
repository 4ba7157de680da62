"""FAISS on GPUs: the only module that names faiss-gpu classes, so the CPU path never depends on them; and which
GPUs a process searches on (``search_gpus``, shared with the torch index).

Used only when ``faiss.get_num_gpus() > 0`` (a faiss-gpu build; faiss-cpu reports 0 and has none of these classes):

- search: ``to_gpus`` clones an index onto the process's search GPUs, **sharded** (each GPU holds 1/G of the
  vectors and the results are merged), flat as ``GpuIndexFlatIP`` in **fp16** (REALM's 13.35M x 128 blocks: 3.4 GB
  instead of 6.8 GB, split over the GPUs), IVF-PQ as ``GpuIndexIVFPQ`` with fp16 lookup tables;
- build: ``train_on_gpus`` runs an IVF index's coarse k-means on every GPU (the slow part of training at 13M scale)
  and ``add_on_gpu`` assigns and PQ-encodes the corpus on one GPU; the result is always a CPU index, so the published
  ``index.faiss`` loads anywhere.
"""

from __future__ import annotations

import logging
import os

import faiss
import numpy as np

logger = logging.getLogger(__name__)


def num_gpus() -> int:
    """GPUs FAISS can use: 0 with faiss-cpu."""
    get = getattr(faiss, "get_num_gpus", None)
    return int(get()) if get is not None else 0


def search_gpus(count: int) -> list[int]:
    """The ordinals, among ``count`` visible GPUs, that this process's search index is placed on.

    A process alone on its node shards the index over every GPU. One of several processes on a node (a launcher's
    ``LOCAL_WORLD_SIZE`` > 1, e.g. one trainer process per GPU) holds a whole copy on its own GPU (``LOCAL_RANK``,
    modulo ``count`` for launchers that show each process only its own GPU). The memory per GPU is the same either
    way (N processes each putting 1/N of the rows on every GPU is one copy per GPU), but a search then never leaves
    the process's GPU: no CUDA context on the others, no copies or syncs behind another process's training kernels.
    """
    if count <= 0:
        return []
    if int(os.environ.get("LOCAL_WORLD_SIZE", "1")) <= 1:
        return list(range(count))
    return [int(os.environ.get("LOCAL_RANK", "0")) % count]


def to_gpus(index: faiss.Index, gpus: list[int], use_float16: bool = True) -> faiss.Index:
    """A copy of CPU ``index`` sharded over ``gpus`` (fp16 vectors for flat, fp16 lookup tables for IVF-PQ)."""
    options = faiss.GpuMultipleClonerOptions()
    options.shard = True
    options.useFloat16 = use_float16
    return faiss.index_cpu_to_gpus_list(index, co=options, gpus=gpus)


def to_cpu(index: faiss.Index) -> faiss.Index:
    """The CPU copy of a GPU (or sharded GPU) index, for ``faiss.write_index``."""
    return faiss.index_gpu_to_cpu(index)


def parameter_space(on_gpu: bool) -> faiss.ParameterSpace:
    """Sets ``nprobe`` and friends; GPU IVF indexes need the GPU flavour."""
    return faiss.GpuParameterSpace() if on_gpu else faiss.ParameterSpace()


def train_on_gpus(index: faiss.Index, sample: np.ndarray) -> None:
    """Trains CPU IVF ``index`` on ``sample`` [S, D] with its coarse k-means on every GPU; PQ codebooks on CPU."""
    ivf = faiss.extract_index_ivf(index)
    clustering = faiss.index_cpu_to_all_gpus(faiss.IndexFlat(ivf.d, ivf.metric_type))
    ivf.clustering_index = clustering
    try:
        index.train(sample)
    finally:
        ivf.clustering_index = None  # note: the GPU index is freed with `clustering`; never serialised


def add_on_gpu(index: faiss.Index, embeddings: np.ndarray, chunk_rows: int) -> faiss.Index:
    """Adds [N, D] ``embeddings`` to trained CPU IVF ``index`` on GPU 0, chunk by chunk; returns the CPU index.

    Falls back to adding on CPU (with a warning) when the index kind has no GPU counterpart.
    """
    resources = faiss.StandardGpuResources()
    options = faiss.GpuClonerOptions()
    options.useFloat16 = True  # note: fp16 lookup tables; GPU IVF-PQ needs them for many sub-quantizers
    try:
        gpu_index = faiss.index_cpu_to_gpu(resources, 0, index, options)
    except RuntimeError as err:
        logger.warning("cannot clone %s to GPU (%s); adding on CPU", type(index).__name__, err)
        gpu_index = None
    target = gpu_index if gpu_index is not None else index
    for start in range(0, len(embeddings), chunk_rows):
        target.add(np.ascontiguousarray(embeddings[start : start + chunk_rows], dtype=np.float32))
    return to_cpu(gpu_index) if gpu_index is not None else index
