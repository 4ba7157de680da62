"""Per-rank shards of an N-process build: written by each rank, checked and streamed together by rank 0.

```
RUN/index/.shards-<weights_sha256>/      (document indexes; a kNN-LM datastore keeps its own under its folder)
  shard-00001-of-00002.npy      [rows, D] float32 (or the key's dtype): rows row_start..row_end-1 (the rank's range)
  shard-00001-of-00002.json     its marker, written LAST (fsynced, atomic rename): rows, dim, sizes, data checksum
```

The rows are whatever the producer computes (block embeddings for REALM's index, hidden-state keys for a kNN-LM
datastore): ``write_shard`` takes a function that fills the rank's array, and ``embed_shard`` is the one for blocks.

- **Keyed by the weights hash**, so after a crash a finished shard of the same model version is reused and one of
  a different version never is (a different folder). The marker also records what the rows were computed from
  (``ShardKey.source``: the corpus, lengths, ...) and the row range, and reuse requires all of them to match.
- **A shard is finished only when its marker exists.** A rank writes its ``.npy``, fsyncs it, and only then writes the
  marker; a rank killed mid-shard leaves a marker-less file that the next run redoes. An old marker is deleted
  *before* its ``.npy`` is rewritten, so a marker never stands next to half-new data.
- **Rank 0 never trusts a report alone**: before assembling it re-reads every marker from disk and checks the file
  against it, and while streaming it recomputes each shard's data checksum (a mismatch drops that marker, so the
  next run redoes the shard, and the build fails loudly).
- The folder is not a ``.staging-*`` one, so a builder start (which deletes staging leftovers) keeps finished shards;
  it is removed once its version is published, and folders of other weights are removed on start.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import datasets
import numpy as np
import torch

from realm.core.atomic import fsync_path, write_text_atomic
from realm.data.packing import SpecialIds
from realm.index.embedding import embed_blocks, output_memmap
from realm.models.retriever import Embedder

logger = logging.getLogger(__name__)

SHARDS_PREFIX = ".shards-"
# rows copied (and hashed) per step when streaming shards into the final array: 64k x 128 floats = 32 MB
_CHUNK_ROWS = 1 << 16


class ShardError(RuntimeError):
    """A shard that is missing, unfinished or does not match its marker; the message names the shard."""


def shard_bounds(lengths: np.ndarray, world_size: int) -> list[tuple[int, int]]:
    """Contiguous ``[start, end)`` row ranges, one per rank, with about equal wordpieces each.

    Contiguous, so rank 0 can stream the shards into the final array in order; balanced by packed length (the
    work), not by count, so the ranks finish together and nobody idles at the synchronisation point.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    num = len(lengths)
    cum = np.cumsum(lengths, dtype=np.float64)
    total = cum[-1] if num else 0.0
    cuts = [0]
    for rank in range(1, world_size):
        target = total * rank / world_size
        # note: cum[i] is the work of rows 0..i; cut after the row whose running total is nearest the target
        i = min(int(np.searchsorted(cum, target, side="left")), num - 1)
        cut = i + 1 if num and (i == 0 or cum[i] - target < target - cum[i - 1]) else i
        cuts.append(min(max(cut, cuts[-1]), num))
    cuts.append(num)
    return list(zip(cuts[:-1], cuts[1:]))


def shard_folder(parent: str | Path, weights_sha256: str) -> Path:
    """Where the shards of one model version live under ``parent`` (``RUN/index`` for document indexes)."""
    return Path(parent) / f"{SHARDS_PREFIX}{weights_sha256}"


def shard_name(rank: int, world_size: int) -> str:
    return f"shard-{rank:05d}-of-{world_size:05d}"


@dataclass(kw_only=True, slots=True)
class ShardKey:
    """What a shard's embeddings depend on: reuse needs every field to match."""

    rank: int
    world_size: int
    row_start: int
    row_end: int
    dim: int
    source: dict[str, Any]
    """What the rows are computed from (weights hash, corpus, lengths, ...); JSON values only."""
    dtype: str = "float32"
    """numpy dtype of the rows ("float32" for block embeddings, "float16" for kNN-LM keys)."""


@dataclass(kw_only=True, slots=True)
class ShardMarker:
    """The marker of a finished shard (``shard-*.json``)."""

    key: ShardKey
    file_size: int
    """Bytes of the ``.npy`` file."""
    data_sha256: str
    """SHA-256 of the array's raw bytes (row-major), what rank 0 recomputes while streaming."""
    embed_seconds: float
    """Seconds the rank spent computing this shard."""

    @property
    def num_rows(self) -> int:
        return self.key.row_end - self.key.row_start

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "ShardMarker":
        data = json.loads(text)
        return cls(
            key=ShardKey(**data["key"]),
            file_size=int(data["file_size"]),
            data_sha256=str(data["data_sha256"]),
            embed_seconds=float(data["embed_seconds"]),
        )


def _paths(folder: Path, rank: int, world_size: int) -> tuple[Path, Path]:
    name = shard_name(rank, world_size)
    return folder / f"{name}.npy", folder / f"{name}.json"


def read_marker(folder: Path, rank: int, world_size: int) -> ShardMarker | None:
    """The marker of shard ``rank`` of ``world_size`` under ``folder``, or None (unfinished, missing or torn)."""
    try:
        return ShardMarker.from_json(_paths(folder, rank, world_size)[1].read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_shard(folder: Path, key: ShardKey) -> ShardMarker:
    """The marker of the finished shard ``key`` after checking the file against it; ``ShardError`` otherwise."""
    data, _ = _paths(folder, key.rank, key.world_size)
    marker = read_marker(folder, key.rank, key.world_size)
    where = f"{folder / shard_name(key.rank, key.world_size)}"
    if marker is None:
        raise ShardError(f"{where}: no marker, the shard is unfinished (its rank died or failed mid-shard)")
    if marker.key != key:
        raise ShardError(f"{where}: marker is for {marker.key}, expected {key}")
    if not data.is_file() or data.stat().st_size != marker.file_size:
        raise ShardError(f"{where}.npy is missing or has the wrong size")
    return marker


def _data_sha256(array: np.ndarray) -> str:
    digest = hashlib.sha256()
    for start in range(0, len(array), _CHUNK_ROWS):
        digest.update(np.ascontiguousarray(array[start : start + _CHUNK_ROWS]))
    return digest.hexdigest()


def _write_marker(path: Path, marker: ShardMarker) -> None:
    """Atomic and durable: a temporary file, fsynced, renamed over ``path``, then the folder fsynced."""
    write_text_atomic(path, marker.to_json())


def write_shard(
    key: ShardKey, folder: Path, fill: Callable[[np.ndarray], None]
) -> tuple[ShardMarker, bool]:
    """Computes this rank's shard with ``fill(out)`` (``out``: a [rows, dim] memmap of ``key.dtype`` to fill in
    place), or reuses it when a previous run finished it for the same key.

    Returns ``(marker, reused)``. An exception from ``fill`` (``BuildCancelled`` on SIGTERM) propagates and leaves no
    marker, so the next run redoes the shard.
    """
    folder.mkdir(parents=True, exist_ok=True)
    data, marker_path = _paths(folder, key.rank, key.world_size)
    try:
        marker = check_shard(folder, key)
        logger.warning("rank %d: reusing finished shard %s (%d rows)", key.rank, data.name, marker.num_rows)
        return marker, True
    except ShardError:
        pass
    marker_path.unlink(missing_ok=True)  # note: before the data is touched, so no marker describes half-new data
    fsync_path(folder)
    started = time.monotonic()
    shape = (key.row_end - key.row_start, key.dim)
    out = output_memmap(data, shape, np.dtype(key.dtype))
    fill(out)
    out.flush()
    seconds = time.monotonic() - started
    checksum = _data_sha256(out)
    del out
    fsync_path(data)
    marker = ShardMarker(key=key, file_size=data.stat().st_size, data_sha256=checksum, embed_seconds=seconds)
    _write_marker(marker_path, marker)  # note: LAST; from here on the shard counts as finished
    return marker, False


def embed_shard(
    embedder: Embedder,
    blocks: datasets.Dataset,
    special: SpecialIds,
    key: ShardKey,
    folder: Path,
    batch_size: int,
    device: torch.device | str | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> tuple[ShardMarker, bool]:
    """Embeds blocks ``key.row_start..row_end-1`` into this rank's shard file (``write_shard``)."""
    rows = np.arange(key.row_start, key.row_end, dtype=np.int64)
    max_length = key.source["max_block_length"]

    def fill(out: np.ndarray) -> None:
        embed_blocks(embedder, blocks, special, max_length, batch_size, out, device, rows=rows, should_stop=should_stop)

    return write_shard(key, folder, fill)


def assemble(folder: Path, keys: list[ShardKey], out_path: Path) -> list[ShardMarker]:
    """Streams the finished shards ``keys`` (in row order) into a new [N, D] ``.npy`` at ``out_path`` (their dtype).

    One chunk of rows is in memory at a time: the final array is a memmap filled chunk by chunk, so the embeddings
    are never held twice (REALM's 6.8 GB would otherwise need 13.6). Every marker is re-checked against its file and
    every shard's data checksum recomputed; a failing shard loses its marker (the next run redoes it) and raises
    ``ShardError``.
    """
    if not keys:
        raise ValueError("no shards to assemble")
    markers = [check_shard(folder, key) for key in keys]
    starts = [m.key.row_start for m in markers]
    ends = [m.key.row_end for m in markers]
    if starts[0] != 0 or starts[1:] != ends[:-1]:
        raise ShardError(f"{folder}: shards do not tile the rows contiguously: {list(zip(starts, ends))}")
    dim, dtype = markers[0].key.dim, np.dtype(markers[0].key.dtype)
    out = output_memmap(out_path, (ends[-1], dim), dtype)
    for marker in markers:
        key = marker.key
        data, marker_path = _paths(folder, key.rank, key.world_size)
        shard = np.load(data, mmap_mode="r")
        if shard.shape != (marker.num_rows, dim) or shard.dtype != dtype:
            raise ShardError(f"{data}: holds {shard.shape} {shard.dtype}, marker says {(marker.num_rows, dim)}")
        digest = hashlib.sha256()
        for start in range(0, len(shard), _CHUNK_ROWS):
            chunk = np.ascontiguousarray(shard[start : start + _CHUNK_ROWS])
            digest.update(chunk)
            out[key.row_start + start : key.row_start + start + len(chunk)] = chunk
        del shard
        if digest.hexdigest() != marker.data_sha256:
            marker_path.unlink(missing_ok=True)
            raise ShardError(f"{data}: data does not match the checksum in its marker (shard dropped, redo it)")
    out.flush()
    del out
    return markers


def remove_shard_folders(parent: str | Path, keep: set[str] | None = None) -> list[Path]:
    """Removes ``parent/.shards-*`` folders whose weights hash is not in ``keep``; returns them.

    Only the single writer of ``parent`` (rank 0, holding the builder lock) calls this, never during a build.
    """
    parent = Path(parent)
    removed = []
    if not parent.is_dir():
        return removed
    for child in parent.iterdir():
        if child.name.startswith(SHARDS_PREFIX) and child.name[len(SHARDS_PREFIX) :] not in (keep or set()):
            shutil.rmtree(child, ignore_errors=True)
            removed.append(child)
    return removed
