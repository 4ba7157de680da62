"""Building a datastore over one or N processes, with the document index's shards, collectives and publish.

1. Every rank loads the LM and tokenizes the corpus (deterministic, so every rank holds the same documents).
2. The documents are split into contiguous ranges with about equal tokens (``realm.index.shards.shard_bounds``);
   each rank writes the keys of its range into its shard (fp16), or reuses it when a previous run of the same LM,
   corpus, key type and windows finished it.
3. The ranks exchange reports (``BuilderGroup.all_gather``); rank 0 re-checks every shard on disk, streams them
   into ``keys.npy`` of a staging folder, writes the values, builds FAISS and publishes (manifest last, rename,
   CURRENT). A rank that failed or was stopped makes every rank raise, and nothing is published.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from realm.core.errors import InputError, RunError
from realm.core.logging import progress
from realm.data.corpus import CorpusConfig, CorpusStats, Document, read_documents
from realm.index.builder_group import BuilderGroup, check_reports, shard_report
from realm.index.embedding import BuildCancelled
from realm.index.shards import (
    ShardKey,
    assemble,
    remove_shard_folders,
    shard_bounds,
    shard_folder,
    write_shard,
)
from realm.knnlm import datastore as ds
from realm.knnlm.lm import (
    KeyReader,
    LMConfig,
    load_causal_lm,
    num_targets,
    score_documents,
    tokenize_documents,
)
from realm.run import publication
from realm.training.optim import model_width

logger = logging.getLogger(__name__)


def read_corpus(corpus: CorpusConfig) -> list[Document]:
    """The corpus's documents, in order; an empty corpus is an error naming the file."""
    stats = CorpusStats()
    docs = list(read_documents(corpus, stats))
    if not any(doc.text.strip() for doc in docs):
        raise InputError(f"{corpus.path}: the corpus has no text ({stats.num_records} records, all empty)")
    if stats.num_malformed:
        logger.warning("%s: skipped %d malformed records", corpus.path, stats.num_malformed)
    return docs


def read_texts(corpus: CorpusConfig) -> list[str]:
    """The corpus's document texts, in order (``read_corpus``)."""
    return [doc.text for doc in read_corpus(corpus)]


def shard_keys(docs: list[np.ndarray], dim: int, world_size: int, source: dict[str, Any]) -> list[ShardKey]:
    """Every rank's shard: a contiguous range of documents, balanced by their number of tokens."""
    counts = num_targets(docs)
    rows = np.concatenate([[0], np.cumsum(counts)])
    keys = []
    for rank, (start, end) in enumerate(shard_bounds(counts, world_size)):
        keys.append(
            ShardKey(
                rank=rank,
                world_size=world_size,
                row_start=int(rows[start]),
                row_end=int(rows[end]),
                dim=dim,
                dtype="float16",
                source={**source, "doc_start": int(start), "doc_end": int(end)},
            )
        )
    return keys


def _fill(model, docs, lm_cfg, cfg: ds.DatastoreConfig, should_stop) -> Callable[[np.ndarray], None]:
    def fill(out: np.ndarray) -> None:
        row = 0
        bar = progress(len(out), "datastore keys", unit="tok")
        try:
            for scored in score_documents(model, docs, lm_cfg, cfg.key_type, layer=cfg.layer):
                if should_stop is not None and should_stop():
                    raise BuildCancelled(f"stopped after {row} of {len(out)} keys")
                out[row : row + len(scored.targets)] = scored.keys.numpy().astype(np.float16)
                row += len(scored.targets)
                bar.update(len(scored.targets))
        finally:
            bar.close()
        if row != len(out):
            raise RunError(f"scored {row} tokens but the shard holds {len(out)} rows")

    return fill


def build_datastore(
    root: str | Path,
    lm_cfg: LMConfig,
    corpus: CorpusConfig,
    cfg: ds.DatastoreConfig,
    group: BuilderGroup | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> Path:
    """Builds, publishes and activates a datastore version under ``root``; call on every rank. Returns the version.

    The caller holds ``root/.lock`` on rank 0 (``publication.exclusive_lock``) so one build writes at a time.
    """
    group = group or BuilderGroup()
    root = Path(root)
    started = time.time()
    model, tokenizer = load_causal_lm(lm_cfg)
    KeyReader(model, cfg.key_type, cfg.layer).close()  # note: a layer the model lacks is refused here, on every rank
    docs = tokenize_documents(tokenizer, read_texts(corpus))
    lm_sha = ds.model_fingerprint(model)
    source = {
        "lm_sha256": lm_sha,
        "corpus_sha256": ds.tokens_fingerprint(docs),
        "key_type": cfg.key_type,
        "layer": cfg.layer,
        "context_length": lm_cfg.context_length,
        "stride": lm_cfg.stride,
    }
    keys = shard_keys(docs, model_width(model), group.world_size, source)  # every key type has the model's width
    folder = shard_folder(root, lm_sha)
    own = keys[group.rank]

    def compute() -> dict[str, Any]:
        mine = docs[own.source["doc_start"] : own.source["doc_end"]]
        marker, reused = write_shard(own, folder, _fill(model, mine, lm_cfg, cfg, should_stop))
        return {"key": asdict(own), "reused": reused, "seconds": marker.embed_seconds}

    reports = group.all_gather(shard_report(group.rank, compute))

    def finish() -> str:
        check_reports(reports)
        staging = publication.new_staging(root)
        try:
            assemble(folder, keys, staging / ds.KEYS_FILE)
            manifest = {
                **source,
                "lm": lm_cfg.model,
                "tokenizer": lm_cfg.tokenizer or lm_cfg.model,
                "corpus": corpus.path,
                "num_documents": len(docs),
                "builder_processes": group.world_size,
                "reused_shards": [r for r, rep in enumerate(reports) if rep["reused"]],
                "key_seconds": round(max(rep["seconds"] for rep in reports), 3),
                "build_seconds": round(time.time() - started, 3),
            }
            values = ds.values_of(docs)
            version = ds.publish_datastore(root, staging, values, cfg, manifest, doc_starts=ds.doc_starts_of(docs))
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        remove_shard_folders(root)
        logger.info("published %s: %d entries", version, len(values))
        return str(version)

    return Path(group.from_main(finish))


def clean_start(root: Path) -> None:
    """What a builder does on start, holding the lock: staging leftovers of a killed build are deleted."""
    os.makedirs(root, exist_ok=True)
    for stale in publication.clean_staging(root):
        logger.info("removed unpublished leftovers %s", stale)
