"""One index build over N builder processes: each rank embeds its shard, rank 0 assembles, indexes and publishes.

1. Rank 0 reads the export (and activates it at once if that version is already published); every rank gets it.
2. Every rank embeds its contiguous, length-balanced row range into its own shard file (``realm/index/shards.py``),
   or reuses the shard if a previous run finished it for the same weights.
3. The ranks exchange reports (all-gather over gloo): ok, cancelled (SIGTERM) or failed with the error.
4. Rank 0 checks every shard **on disk** against its marker, streams the shards into ``embeddings.npy`` of a staging
   folder chunk by chunk, then indexes, publishes and activates exactly like the 1-process builder
   (``realm.index.build_version.build_from_embeddings``: FAISS, manifest last, rename, CURRENT flip); the others wait
   for its outcome and raise the same way if it failed.

Why a collective wait (with a timeout) rather than rank 0 polling for marker files: the reports carry *why* a rank
failed, a rank that is still working is told apart from one that died (a dead peer breaks the gloo connection, and
the launcher tears the group down), and ``collective_timeout_s`` bounds the wait either way. The collective only
says when to look: rank 0 still refuses any shard without a valid marker, so a dead or lying peer is never taken as
done. A killed rank's shard stays marker-less, and the next run redoes it (and reuses the finished ones).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import datasets
import torch

from realm.core.precision import resolve_precision
from realm.index.build_version import build_from_embeddings, load_build_inputs, load_doc_embedder
from realm.index.builder_group import BuilderGroup, PeerError, check_reports, shard_report
from realm.index.embedding import block_lengths
from realm.index.mips import IndexConfig
from realm.index.shards import (
    ShardKey,
    assemble,
    embed_shard,
    remove_shard_folders,
    shard_bounds,
    shard_folder,
)
from realm.run import layout, publication
from realm.run.live_index import activate_if_built

logger = logging.getLogger(__name__)


def shard_keys(blocks: datasets.Dataset, export: dict[str, Any], dim: int, world_size: int) -> list[ShardKey]:
    """Every rank's shard of ``blocks`` for this export, in rank (= row) order."""
    bounds = shard_bounds(block_lengths(blocks, export["max_block_length"]), world_size)
    return [
        ShardKey(
            rank=rank,
            world_size=world_size,
            row_start=start,
            row_end=end,
            dim=dim,
            source={
                "weights_sha256": export["weights_sha256"],
                "blocks": export["blocks"],
                "num_blocks": len(blocks),
                "max_block_length": export["max_block_length"],
            },
        )
        for rank, (start, end) in enumerate(bounds)
    ]


def _prepare(run_dir: str | Path, export_step: int, export_path: Path, keep_versions: int) -> dict[str, Any]:
    """Rank 0: the export's manifest, and the version path when it is already published (then activated)."""
    export = publication.read_manifest(export_path)
    if export is None:
        raise FileNotFoundError(f"{export_path} is not a published retriever export")
    built = activate_if_built(run_dir, export_step, export, keep_versions)
    return {"export": export, "built": None if built is None else str(built)}


def _embed_own_shard(
    run_dir: str | Path,
    export_path: Path,
    export: dict[str, Any],
    group: BuilderGroup,
    batch_size: int,
    device: str,
    precision: str,
    should_stop: Callable[[], bool] | None,
) -> dict[str, Any]:
    """This rank's report: its shard embedded (or reused), cancelled, or failed with the error; never raises."""
    # note: transformers warns that a model loaded inside a process group was not tensor-parallel sharded; that is
    # intended (every rank runs the whole embedder on its own shard), so the N-fold warning is silenced
    logging.getLogger("transformers.distributed.tensor_parallel").setLevel(logging.ERROR)

    def compute() -> dict[str, Any]:
        embedder = load_doc_embedder(export_path, device, precision, export["max_block_length"])
        blocks, special = load_build_inputs(export)
        key = shard_keys(blocks, export, embedder.projection.out_features, group.world_size)[group.rank]
        folder = shard_folder(layout.index_dir(run_dir), export["weights_sha256"])
        marker, reused = embed_shard(embedder, blocks, special, key, folder, batch_size, device, should_stop)
        return {"key": asdict(key), "reused": reused, "embed_seconds": marker.embed_seconds}

    return shard_report(group.rank, compute)


def _assemble_and_build(
    run_dir: str | Path,
    export_step: int,
    export: dict[str, Any],
    reports: list[dict[str, Any]],
    cfg: IndexConfig,
    keep_versions: int,
    started: float,
    precision: str,
) -> str:
    """Rank 0, after every rank reported: check the shards on disk, stream them together, index, publish, activate."""
    check_reports(reports)
    blocks = datasets.load_from_disk(export["blocks"])
    dim = reports[0]["key"]["dim"]
    keys = shard_keys(blocks, export, dim, len(reports))
    for key, report in zip(keys, reports):
        if ShardKey(**report["key"]) != key:
            raise PeerError(f"rank {key.rank} embedded {report['key']}, expected {asdict(key)}")
    folder = shard_folder(layout.index_dir(run_dir), export["weights_sha256"])

    def assemble_shards(path: Path) -> dict[str, Any]:
        assembled = time.monotonic()
        assemble(folder, keys, path)
        logger.info("assembled %d shards in %.1f s", len(keys), time.monotonic() - assembled)
        return {
            "builder_processes": len(reports),
            "reused_shards": [r for r, rep in enumerate(reports) if rep["reused"]],
            "embed_seconds": round(max(rep["embed_seconds"] for rep in reports), 3),
            "embed_precision": precision,
        }

    version = build_from_embeddings(run_dir, export_step, export, blocks, cfg, keep_versions, started, assemble_shards)
    newer = publication.list_published(layout.retriever_dir(run_dir), layout.RETRIEVER_PREFIX)
    keep = {m["weights_sha256"] for s, p in newer if s > export_step and (m := publication.read_manifest(p)) is not None}
    remove_shard_folders(layout.index_dir(run_dir), keep)
    return str(version)


def build_index_version_sharded(
    run_dir: str | Path,
    export_step: int,
    export_path: Path,
    cfg: IndexConfig,
    group: BuilderGroup,
    *,
    batch_size: int = 64,
    keep_versions: int = 3,
    device: str = "cpu",
    precision: str = "auto",
    should_stop: Callable[[], bool] | None = None,
) -> Path:
    """Builds, publishes and activates the index for ``export_path`` with every rank of ``group``; call on all ranks.

    Returns the published version on every rank. Raises on every rank when any rank failed (``PeerError`` on the
    ranks that did not fail themselves) or was stopped (``BuildCancelled``); CURRENT is then untouched and finished
    shards stay for the next run.
    """
    started = time.time()
    prepared = group.from_main(lambda: _prepare(run_dir, export_step, export_path, keep_versions))
    if prepared["built"] is not None:
        return Path(prepared["built"])
    export = prepared["export"]
    precision = resolve_precision(precision, torch.device(device).type)  # note: what the manifest records
    report = _embed_own_shard(run_dir, export_path, export, group, batch_size, device, precision, should_stop)
    reports = group.all_gather(report)
    version = group.from_main(
        lambda: _assemble_and_build(run_dir, export_step, export, reports, cfg, keep_versions, started, precision)
    )
    return Path(version)
