"""One index build, one verb a step: **embed** the blocks with a retriever export's document embedder into a staging
``embeddings.npy`` -> **index** them (``index_embeddings``: the FAISS index and block ids beside them) -> **publish**
(``realm.index.versions.publish_index_version``: manifest written last, then the rename to ``index/v-{step:08d}``)
-> **activate** (``realm.run.live_index.activate``: the atomic CURRENT flip, older versions and exports pruned).

``build_index_version`` is the whole build in one process; the N-process builder (``realm.index_builder.sharded``)
embeds shards instead and shares the rest through ``build_from_embeddings``. Everything is written under
``index/.staging-<uuid>/`` and is visible only once published, so a build killed at any point leaves the live index as
it was. The layout and manifest fields belong to ``realm.run.publication`` and ``realm.index.versions``; this module
only produces the files.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import time
from pathlib import Path
from typing import Callable

import datasets
import numpy as np
import torch

from realm.core.atomic import disk_writes
from realm.core.precision import DTYPES, resolve_precision, set_kernels
from realm.data.blocks import load_blocks
from realm.data.packing import SpecialIds
from realm.data.vocab import load_tokenizer
from realm.index import versions
from realm.index.budget import IndexPlan, plan_index
from realm.index.embedding import embed_blocks, output_memmap
from realm.index.gpu import num_gpus
from realm.index.mips import FaissIndex, IndexConfig
from realm.models.retriever import Embedder, Retriever
from realm.run import layout, publication
from realm.run.live_index import activate, activate_if_built, remove_older_exports
from realm.run.paths import RUN_ROOT, record_path, run_root

logger = logging.getLogger(__name__)

def load_doc_embedder(export_path: Path, device: str, precision: str = "auto", max_length: int = 0) -> Embedder:
    """The export's document embedder on ``device``, its weights cast to ``precision`` (resolved for the device:
    ``realm.core.precision``) for inference, with the attention kernel fastest there; an export whose weights do not
    match its manifest's checksum is refused (``RunError``). ``max_length``: the longest block, for the kernel."""
    # note: casting the weights (rather than autocasting an fp32 model) is what half-precision inference wants: no
    # per-op casts, half the weight traffic. The index only chooses candidates; the trainer re-scores them live.
    device_type = torch.device(device).type
    resolved = resolve_precision(precision, device_type)
    layout.check_export(export_path)
    embedder = Retriever.from_pretrained(export_path).doc_embedder.to(device=device, dtype=DTYPES[resolved])
    set_kernels(embedder, device_type, resolved, max_length)
    return embedder


def blocks_fingerprint(blocks: datasets.Dataset) -> str:
    """``run_dir.corpus_fingerprint`` of the ordered ``uid`` column, streamed in chunks (13M uids stay off-heap)."""
    uids = blocks.select_columns(["uid"]).with_format("arrow")
    chunks = uids.iter(batch_size=1 << 16)
    return versions.corpus_fingerprint(uid for table in chunks for uid in table.column(0).to_pylist())


def index_embeddings(staging: Path, cfg: IndexConfig) -> IndexPlan:
    """Given ``staging/embeddings.npy`` ([N, D] float32, row i = block i), writes the FAISS index and the block ids
    beside it and returns the plan it followed (publishing is the caller's next step).

    The factory is ``cfg.factory``, or under ``cfg.memory_budget_gb`` the one ``plan_index`` picks; the plan (with its
    expected size) is logged, and ``IndexPlan.manifest_fields`` is what the published manifest records of it.
    """
    embeddings = np.load(staging / versions.EMBEDDINGS_FILE, mmap_mode="r")
    plan = plan_index(embeddings.shape[0], embeddings.shape[1], cfg, num_gpus())
    logger.info("%s", plan.describe())
    FaissIndex.build(embeddings, dataclasses.replace(cfg, factory=plan.factory)).save(staging / versions.FAISS_FILE)
    np.save(staging / versions.BLOCK_IDS_FILE, np.arange(len(embeddings), dtype=np.int64))
    return plan


def load_build_inputs(export: dict) -> tuple[datasets.Dataset, SpecialIds]:
    """The blocks and special ids an export names, checked as every command checks them (``load_tokenizer``;
    ``load_blocks``: an Arrow file cut short, or a wordpiece id outside the vocabulary, is a one-line ``CorpusError``
    naming the file, which the builder does not retry, instead of an ``IndexError`` deep in the embedder)."""
    tokenizer = load_tokenizer(export["tokenizer"])
    return load_blocks(export["blocks"], tokenizer), SpecialIds.of(tokenizer)


def build_from_embeddings(
    run_dir: str | Path,
    export_step: int,
    export: dict,
    blocks: datasets.Dataset,
    cfg: IndexConfig,
    keep_versions: int,
    started: float,
    write_embeddings: Callable[[Path], dict],
) -> Path:
    """Every build after loading its inputs: ``write_embeddings(path)`` fills a staging ``embeddings.npy`` (and returns
    extra manifest fields; the embed step, whichever way a builder does it); it is indexed, published as
    ``index/v-{export_step}`` and activated (made CURRENT), and exports older than it are removed. Any failure (or a
    stop) removes the staging folder and leaves CURRENT as it was; a full or read-only disk is a ``DiskError`` naming
    the file."""
    with disk_writes(layout.index_dir(run_dir)):
        staging = publication.new_staging(layout.index_dir(run_dir))
        try:
            extra = write_embeddings(staging / versions.EMBEDDINGS_FILE)
            plan = index_embeddings(staging, cfg)
            version = versions.publish_index_version(
                run_dir,
                staging,
                step=export_step,
                weights_sha256=export["weights_sha256"],
                corpus_fingerprint=blocks_fingerprint(blocks),
                factory=plan.factory,
                started=started,
                # note: the blocks relative to the run when inside it, so that a copied run reads its own
                extra={**plan.manifest_fields(), "blocks": record_path(export["blocks"], run_dir),
                       RUN_ROOT: run_root(staging, run_dir), "max_block_length": export["max_block_length"],
                       **extra},  # fmt: skip
            )
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        activate(run_dir, version, keep_versions)
        remove_older_exports(run_dir, export_step)
    return version


def build_index_version(
    run_dir: str | Path,
    export_step: int,
    export_path: Path,
    cfg: IndexConfig,
    *,
    batch_size: int = 64,
    keep_versions: int = 3,
    device: str = "cpu",
    precision: str = "auto",
    should_stop: Callable[[], bool] | None = None,
) -> Path:
    """Builds, publishes and activates the index for the retriever export at ``export_path``; returns the version.

    If ``index/v-{export_step}`` is already published from the same weights (a builder that died between the rename
    and the CURRENT flip), it is activated as is. ``should_stop`` is polled between batches; a stop or any error
    removes the staging folder and leaves CURRENT untouched.
    """
    started = time.time()
    export = publication.read_manifest(export_path)
    if export is None:
        raise FileNotFoundError(f"{export_path} is not a published retriever export")
    built = activate_if_built(run_dir, export_step, export, keep_versions)
    if built is not None:
        return built

    precision = resolve_precision(precision, torch.device(device).type)  # note: once; the manifest records it
    embedder = load_doc_embedder(export_path, device, precision, export["max_block_length"])
    blocks, special = load_build_inputs(export)

    def embed(path: Path) -> dict:
        out = output_memmap(path, (len(blocks), embedder.projection.out_features))
        embed_blocks(
            embedder, blocks, special, export["max_block_length"], batch_size, out, device, should_stop=should_stop
        )
        out.flush()
        return {"embed_precision": precision}

    return build_from_embeddings(run_dir, export_step, export, blocks, cfg, keep_versions, started, embed)
