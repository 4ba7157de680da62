"""Which search held-out evaluation uses (``eval.search``): the run's published index, or an exact search streamed
over the blocks, so that neither holds the corpus's [N, D] embeddings in one process.

- ``index``: the live version of ``RUN/index`` (``index/CURRENT``, the one the trainer loads), which must have been
  built from the evaluated step's document weights over the same blocks; anything else is an error.
- ``exact``: the blocks embedded now by the evaluated model, ``eval.exact_chunk_blocks`` at a time, each query
  keeping its running top-k (``realm.index.streamed``): peak memory ``chunk x D`` plus ``queries x k``.
- ``auto`` (default): ``index`` when the live version matches the evaluated weights, ``exact`` otherwise; it says
  which it chose.

An approximate index (IVF-PQ, HNSW) gives the figures of what the trainer retrieves, not of exact MIPS; a Flat index
gives the exact figures without embedding anything.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterator

import datasets
import numpy as np
import torch

from realm.core.errors import RunError
from realm.data.packing import SpecialIds
from realm.index.build_version import blocks_fingerprint
from realm.index.embedding import block_lengths, embed_blocks
from realm.index.versions import PublishedIndex, load_index_version
from realm.models.retriever import Embedder
from realm.pretrain.config import EVAL_SEARCH_MODES
from realm.run.layout import RETRIEVER_PREFIX, retriever_dir
from realm.run.live_index import IndexVersionError, current_index_version
from realm.run.publication import folder_name, read_manifest

logger = logging.getLogger(__name__)

def published_index_mismatch(run_dir: str | Path, step: int, blocks: datasets.Dataset) -> tuple[Path | None, str]:
    """(the live index version, None) when it was built from retriever step ``step`` over ``blocks``; otherwise
    (None, why not). When the step's retriever export is still there its weights must be the index's."""
    version = current_index_version(run_dir)
    if version is None:
        return None, f"{run_dir} has no live index (index/CURRENT)"
    manifest = read_manifest(version) or {}
    if manifest.get("step") != step:
        return None, f"the live index {version.name} was built from step {manifest.get('step')}, not step {step}"
    export = read_manifest(retriever_dir(run_dir) / folder_name(RETRIEVER_PREFIX, step))
    if export is not None and export.get("weights_sha256") != manifest.get("weights_sha256"):
        return None, f"the live index {version.name} was built from other weights than the export of step {step}"
    if manifest.get("num_vectors") != len(blocks):
        return None, f"the live index {version.name} holds {manifest.get('num_vectors')} blocks, not {len(blocks)}"
    if manifest.get("corpus_fingerprint") != blocks_fingerprint(blocks):
        return None, f"the live index {version.name} was built over other blocks (corpus fingerprint differs)"
    return version, ""


def heldout_index(
    mode: str, run_dir: str | Path | None, step: int | None, blocks: datasets.Dataset
) -> PublishedIndex | None:
    """The index ``mode`` chooses for evaluating the weights of retriever step ``step`` of the run at ``run_dir``:
    the published one, or None for the streamed exact search (``heldout_outcomes`` without ``index``)."""
    if mode not in EVAL_SEARCH_MODES:
        raise ValueError(f"eval.search must be one of {', '.join(EVAL_SEARCH_MODES)}, got {mode!r}")
    if mode == "exact":
        return None
    if run_dir is None or step is None:
        why = "no run directory and step to find a published index in"
        version = None
    else:
        version, why = published_index_mismatch(run_dir, step, blocks)
    if version is None:
        if mode == "index":
            raise RunError(f"eval.search=index: {why}; use eval.search=exact (or auto)")
        logger.info("held-out evaluation: exact search streamed over the blocks (%s)", why)
        return None
    try:
        published = load_index_version(version)
    except IndexVersionError as err:
        if mode == "index":
            raise RunError(f"eval.search=index: {err}") from None
        logger.warning("held-out evaluation: exact search streamed over the blocks (%s)", err)
        return None
    logger.info("held-out evaluation: published index %s (%s)", version.name, published.manifest.get("factory", "?"))
    return published


def embedded_chunks(
    embedder: Embedder,
    blocks: datasets.Dataset,
    special: SpecialIds,
    max_block_length: int,
    chunk_blocks: int,
    batch_size: int = 128,
) -> Iterator[torch.Tensor]:
    """[C, D] document embeddings of consecutive runs of ``chunk_blocks`` blocks, each computed when asked for."""
    if chunk_blocks <= 0:
        raise ValueError(f"chunk_blocks must be positive, got {chunk_blocks}")
    dim = embedder.projection.out_features
    # note: once, not once a chunk: every chunk's length sort would otherwise read all N blocks' lengths again
    lengths = block_lengths(blocks, max_block_length)
    for start in range(0, len(blocks), chunk_blocks):
        rows = np.arange(start, min(start + chunk_blocks, len(blocks)), dtype=np.int64)
        out = np.empty((len(rows), dim), dtype=np.float32)
        embed_blocks(embedder, blocks, special, max_block_length, batch_size, out, rows=rows, lengths=lengths)
        yield torch.from_numpy(out)
