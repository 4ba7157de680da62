"""Re-embedding the knowledge corpus with the document embedder, straight into a preallocated array.

Blocks are embedded in order of length so each batch pads little, and every batch is written into its own rows of
``out`` (typically a ``np.memmap``): nothing is concatenated, so peak memory stays a few batches plus the model even
at REALM's 13M blocks. A subset of rows (one rank's shard) can be embedded into a shard-sized ``out``. A background
thread reads the blocks in large slices (one Arrow gather per ``_READ_BATCHES`` batches), packs each batch and pins
it when the model is on a GPU, while the forward pass of the batch before runs: the device does not wait for input.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Callable

import datasets
import numpy as np
import pyarrow.compute as pc
import torch

from realm.core.atomic import check_free_space, disk_writes
from realm.core.logging import progress
from realm.core.prefetch import Prefetcher
from realm.data.packing import Ragged, SpecialIds, pack_blocks
from realm.models.retriever import Embedder

logger = logging.getLogger(__name__)

_LENGTH_BATCH = 1 << 16
_LOG_INTERVAL_S = 30.0
_READ_BATCHES = 16  # batches per Arrow read: large reads amortise the gather, 16 keep the token lists small
_PREFETCH_DEPTH = 4
_NPY_HEADER_BYTES = 4096
_NO_FALLOCATE = {errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS}
"""posix_fallocate's answers on a filesystem that cannot reserve space (the free-space check is then all there is)."""


class BuildCancelled(RuntimeError):
    """Raised between batches when the builder was asked to stop (SIGTERM); the caller discards its staging."""


def output_memmap(path: Path, shape: tuple[int, ...], dtype: np.dtype | type = np.float32) -> np.memmap:
    """A new ``.npy`` file of ``shape`` mapped for writing, its disk space checked and reserved before anything is
    written: a write through a memory map to a disk that has run out of space ends the process with SIGBUS (no error,
    no log line), so a short disk is a ``DiskError`` here instead."""
    num_bytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    check_free_space(path, num_bytes + _NPY_HEADER_BYTES)
    with disk_writes(path):
        out = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)
        try:
            # note: open_memmap makes a sparse file; allocating its blocks now means no later write can find the disk
            # full (the free-space check alone races with other writers of the disk, such as the trainer's checkpoints)
            with open(path, "r+b") as f:
                os.posix_fallocate(f.fileno(), 0, os.fstat(f.fileno()).st_size)
        except OSError as err:
            if err.errno not in _NO_FALLOCATE:
                raise
    return out


def block_lengths(blocks: datasets.Dataset, max_block_length: int) -> np.ndarray:
    """[N] int64 packed length of every block, ``[CLS] title [SEP] body [SEP]`` capped at ``max_block_length``.

    Computed from the Arrow list lengths in chunks, without materialising the token lists in Python.
    """
    lengths = np.empty(len(blocks), dtype=np.int64)
    columns = blocks.select_columns(["title_ids", "body_ids"]).with_format("arrow")
    start = 0
    for table in columns.iter(batch_size=_LENGTH_BATCH):
        title = pc.list_value_length(table.column("title_ids")).to_numpy(zero_copy_only=False)
        body = pc.list_value_length(table.column("body_ids")).to_numpy(zero_copy_only=False)
        lengths[start : start + len(title)] = title + body + 3
        start += len(title)
    return np.minimum(lengths, max_block_length)


def packed_batches(
    blocks: datasets.Dataset,
    rows: np.ndarray,
    order: np.ndarray,
    special: SpecialIds,
    max_block_length: int,
    batch_size: int,
    pin: bool,
) -> Iterator[tuple[np.ndarray, dict[str, torch.Tensor]]]:
    """(positions in ``rows``, packed inputs) of each batch of ``order``, read ``_READ_BATCHES`` batches at a time."""
    # note: Arrow in, arrays out: no Python list of wordpieces (lists held the GIL long enough to starve a GPU)
    columns = blocks.select_columns(["title_ids", "body_ids"]).with_format("arrow")
    for first in range(0, len(order), batch_size * _READ_BATCHES):
        chunk = order[first : first + batch_size * _READ_BATCHES]
        table = columns[rows[chunk]]
        titles, bodies = Ragged.from_arrow(table.column("title_ids")), Ragged.from_arrow(table.column("body_ids"))
        for start in range(0, len(chunk), batch_size):
            end = start + batch_size
            inputs = pack_blocks(titles.slice(start, end), bodies.slice(start, end), special, max_block_length)
            yield chunk[start:end], ({k: t.pin_memory() for k, t in inputs.items()} if pin else inputs)


def embed_blocks(
    embedder: Embedder,
    blocks: datasets.Dataset,
    special: SpecialIds,
    max_block_length: int,
    batch_size: int,
    out: np.ndarray,
    device: torch.device | str | None = None,
    *,
    rows: np.ndarray | None = None,
    should_stop: Callable[[], bool] | None = None,
    lengths: np.ndarray | None = None,
) -> None:
    """Writes the document embedding of block ``rows[i]`` into ``out[i]``.

    Args:
        embedder: the document embedder; run in eval mode under ``torch.inference_mode`` (its mode is restored).
        blocks: dataset with ``title_ids`` and ``body_ids`` columns; row number = block id.
        special: special wordpiece ids of the tokenizer the blocks were tokenized with.
        max_block_length: wordpieces per packed block, specials included.
        batch_size: blocks per forward pass.
        out: [len(rows), embed_dim] float32 array (e.g. a memmap); written in place.
        device: where inputs go; defaults to the embedder's device (the model is never moved here).
        rows: [M] block ids to embed (a shard); defaults to all blocks, so ``out[i]`` is block ``i``.
        should_stop: polled between batches; when it returns True, ``BuildCancelled`` is raised.
        lengths: [N] ``block_lengths(blocks, max_block_length)``, when the caller has them already (a caller that
            embeds the corpus chunk by chunk computes them once, not once a chunk).
    """
    rows = np.arange(len(blocks), dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
    embed_dim = embedder.projection.out_features
    if out.shape != (len(rows), embed_dim):
        raise ValueError(f"out has shape {out.shape}, expected {(len(rows), embed_dim)}")
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    device = torch.device(device) if device is not None else next(embedder.parameters()).device
    # note: stable sort of shard positions by length; lengths of all blocks are cheap (Arrow metadata only).
    lengths = block_lengths(blocks, max_block_length) if lengths is None else lengths
    order = np.argsort(lengths[rows], kind="stable")
    cuda = device.type == "cuda"
    batches = packed_batches(blocks, rows, order, special, max_block_length, batch_size, pin=cuda)
    was_training = embedder.training
    embedder.eval()
    started = last_log = time.monotonic()
    done = 0
    bar = progress(len(order), "embedding blocks", unit="block")
    try:
        with torch.inference_mode(), Prefetcher(batches, _PREFETCH_DEPTH, "block-loader", device) as loaded:
            for positions, inputs in loaded:
                if should_stop is not None and should_stop():
                    raise BuildCancelled(f"stopped after {done} of {len(order)} blocks")
                emb = embedder(**{name: t.to(device, non_blocking=cuda) for name, t in inputs.items()})  # [B, D]
                out[positions] = emb.float().cpu().numpy()
                done += len(positions)
                bar.update(len(positions))
                if time.monotonic() - last_log > _LOG_INTERVAL_S:
                    last_log = time.monotonic()
                    logger.info("embedded %d/%d blocks (%.0f blocks/s)", done, len(order), done / (last_log - started))
    finally:
        bar.close()
        embedder.train(was_training)
