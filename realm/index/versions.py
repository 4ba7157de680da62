"""Index versions on disk: ``RUN/index/v-NNNNNNNN`` (embeddings, FAISS index, block ids, manifest written last),
publishing one, and loading one after checking it against its manifest. Which version is live (``CURRENT``) is
``realm.run.live_index``.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import torch
from torch import Tensor

from realm.index import torch_search
from realm.index.mips import FaissIndex, IndexConfig
from realm.run.layout import INDEX_PREFIX, index_dir
from realm.run.live_index import IndexVersionError
from realm.run.publication import (
    MANIFEST,
    check_files,
    file_entries,
    folder_name,
    now_iso,
    publish_folder,
    read_manifest,
)

EMBEDDINGS_FILE = "embeddings.npy"
FAISS_FILE = "index.faiss"


BLOCK_IDS_FILE = "block_ids.npy"
INDEX_FILES = (EMBEDDINGS_FILE, FAISS_FILE, BLOCK_IDS_FILE)


def corpus_fingerprint(uids: Iterable[str]) -> str:
    """SHA-1 over the ordered block uids: two corpora agree iff they have the same blocks in the same rows."""
    digest = hashlib.sha1()
    for uid in uids:
        digest.update(uid.encode())
        digest.update(b"\n")
    return digest.hexdigest()


def publish_index_version(
    run_dir: str | Path,
    staging: Path,
    *,
    step: int,
    weights_sha256: str,
    corpus_fingerprint: str,
    factory: str,
    started: float,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Publishes a staging folder holding ``INDEX_FILES`` as ``index/v-{step:08d}`` (CURRENT is not touched).

    ``started`` is the ``time.time()`` the build began, recorded as ``build_seconds``.
    """
    embeddings = np.load(staging / EMBEDDINGS_FILE, mmap_mode="r")
    manifest = {
        "step": step,
        "weights_sha256": weights_sha256,
        "corpus_fingerprint": corpus_fingerprint,
        "num_vectors": int(embeddings.shape[0]),
        "dim": int(embeddings.shape[1]),
        "factory": factory,
        "files": file_entries(staging, INDEX_FILES),
        "build_seconds": round(time.time() - started, 3),
        "created": now_iso(),
        **(extra or {}),
    }
    del embeddings
    return publish_folder(staging, index_dir(run_dir) / folder_name(INDEX_PREFIX, step), manifest)


@dataclass(slots=True)
class PublishedIndex:
    """A loaded, verified index version; ``search`` returns block ids (row numbers of the blocks dataset)."""

    step: int
    """Retriever step whose document embedder produced the embeddings."""
    path: Path
    index: FaissIndex | torch_search.TorchIndex
    manifest: dict[str, Any]
    block_ids: np.ndarray
    """[N] int64: block id of each FAISS row."""

    @property
    def num_vectors(self) -> int:
        return self.index.num_vectors

    def search(self, queries: Tensor, k: int) -> tuple[Tensor, Tensor]:
        """[Q, D] -> ([Q, min(k, N)] scores, [Q, min(k, N)] block ids), best first; missing results are id -1."""
        scores, rows = self.index.search(queries, k)
        ids = torch.from_numpy(self.block_ids[rows.clamp(min=0).cpu().numpy()]).to(rows.device)
        return scores, torch.where(rows < 0, rows, ids)

    def embeddings(self) -> np.ndarray:
        """[N, D] float32 embeddings, memory-mapped read-only."""
        return np.load(self.path / EMBEDDINGS_FILE, mmap_mode="r")


def load_index_version(path: Path, verify: bool = True, cfg: IndexConfig | None = None) -> PublishedIndex:
    """Loads ``index/v-*`` after checking it against its manifest; raises ``IndexVersionError`` on any mismatch.

    File sizes are always checked; ``verify`` also recomputes SHA-256 checksums (about 15 s for REALM's 6.8 GB of
    embeddings, so callers on a critical path should load in a thread, as ``IndexWatcher`` does). ``cfg`` sets the
    search parameters (nprobe, efSearch).
    """
    path = Path(path)
    manifest = read_manifest(path)
    if manifest is None:
        raise IndexVersionError(f"{path}: no readable {MANIFEST} (unpublished, partial or removed version)")
    missing = [key for key in ("step", "num_vectors", "dim", "files") if key not in manifest]
    missing += [f"files.{name}" for name in INDEX_FILES if name not in manifest.get("files", {})]
    if missing:
        raise IndexVersionError(f"{path}: manifest lacks {missing}")
    problems = check_files(path, manifest["files"], verify_checksums=verify)
    if problems:
        raise IndexVersionError(f"{path}: " + "; ".join(problems))
    try:
        index = FaissIndex.load(path / FAISS_FILE, cfg)
        block_ids = np.load(path / BLOCK_IDS_FILE, mmap_mode="r")
    except (RuntimeError, ValueError, OSError) as err:
        raise IndexVersionError(f"{path}: cannot read index files: {err}") from err
    index.factory = manifest.get("factory", index.factory)
    index = torch_search.searcher(index, lambda: np.load(path / EMBEDDINGS_FILE, mmap_mode="r"), cfg, path)
    expected = (manifest["num_vectors"], manifest["dim"])
    if (index.num_vectors, index.dim) != expected or block_ids.shape != (expected[0],):
        raise IndexVersionError(
            f"{path}: FAISS index holds {index.num_vectors} x {index.dim} and block_ids {block_ids.shape}, "
            f"manifest says {expected[0]} x {expected[1]}"
        )
    return PublishedIndex(step=int(manifest["step"]), path=path, index=index, manifest=manifest, block_ids=block_ids)
