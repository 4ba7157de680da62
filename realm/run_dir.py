"""The run-directory protocol: the only thing the trainer and the index builder share, and the one module that knows
its layout.

```
RUN/
  config.yaml                   resolved configuration (trainer)
  checkpoints/step-00000500/    training state (trainer; published with the generic helpers below)
  retriever/step-00000500/      doc-embedder weights for the builder: Retriever.save_pretrained layout + manifest.json
  index/v-00000500/             embeddings.npy [N, D] float32, index.faiss, block_ids.npy, manifest.json written LAST
  index/CURRENT                 name of the live version folder, replaced atomically with os.replace
  index/.staging-<uuid>/        a build in progress: never read, removed when the builder starts
  DONE                          the trainer has finished, so a standalone builder may exit
```

Every published folder follows one rule: it is written under ``.staging-<uuid>``, its files are fsynced,
``manifest.json`` is written last, and only then is the folder renamed to its final name. Readers list only folders
whose manifest parses, so a crash at any point leaves either nothing or a complete folder. Published folders are never
modified in place; they are only removed whole (renamed back to a staging name first, so a crash mid-delete cannot leave
a manifest next to missing files).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import numpy as np
import torch
from torch import Tensor

from realm.atomic import fsync_path, write_text_atomic
from realm.index import FaissIndex, IndexConfig

if TYPE_CHECKING:
    from realm.retriever import Retriever

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
STAGING_PREFIX = ".staging-"
CHECKPOINTS_DIR, CHECKPOINT_PREFIX = "checkpoints", "step-"
RETRIEVER_DIR, RETRIEVER_PREFIX = "retriever", "step-"
INDEX_DIR, INDEX_PREFIX = "index", "v-"
CURRENT = "CURRENT"
DONE = "DONE"


# ---------------------------------------------------------------------------------------------- generic helpers


def folder_name(prefix: str, step: int) -> str:
    """``("v-", 500) -> "v-00000500"``; zero-padded so names sort like steps."""
    return f"{prefix}{step:08d}"


def parse_step(name: str, prefix: str) -> int | None:
    """The step of a folder named ``{prefix}{step:08d}``, or None for any other name."""
    rest = name[len(prefix) :] if name.startswith(prefix) else ""
    return int(rest) if rest.isdigit() else None


def _fsync_tree(folder: Path) -> None:
    """fsyncs every file and directory under ``folder`` (bottom-up, the folder itself last)."""
    for root, _, files in os.walk(folder, topdown=False):
        for name in files:
            fsync_path(Path(root) / name)
        fsync_path(Path(root))


def new_staging(parent: Path) -> Path:
    """Creates and returns an empty ``parent/.staging-<uuid>`` folder (``parent`` is created if needed)."""
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    staging = parent / f"{STAGING_PREFIX}{uuid.uuid4().hex}"
    staging.mkdir()
    return staging


def publish_folder(staging: Path, final: Path, manifest: dict[str, Any]) -> Path:
    """Commits ``staging`` as ``final``: fsync its files, write ``manifest.json`` last, fsync, rename.

    Raises ``FileExistsError`` if ``final`` exists (published folders are immutable; on Linux ``rename`` would
    silently replace an empty directory, hence the explicit check). Assumes one writer per parent folder.
    """
    staging, final = Path(staging), Path(final)
    if final.exists():
        raise FileExistsError(f"{final} already exists; published folders are never overwritten")
    if (staging / MANIFEST).exists():
        raise ValueError(f"{staging} already holds a {MANIFEST}; it must be written last, by publish_folder")
    _fsync_tree(staging)
    with open(staging / MANIFEST, "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    fsync_path(staging)
    os.rename(staging, final)
    fsync_path(final.parent)  # note: makes the rename itself durable
    return final


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """The parsed ``manifest.json`` of ``folder``, or None when it is missing or unreadable (= not published)."""
    try:
        data = json.loads((Path(folder) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def list_published(parent: Path, prefix: str) -> list[tuple[int, Path]]:
    """``(step, path)`` of every ``parent/{prefix}NNNNNNNN`` folder with a readable manifest, oldest first."""
    parent = Path(parent)
    if not parent.is_dir():
        return []
    found = []
    for child in parent.iterdir():
        step = parse_step(child.name, prefix)
        if step is not None and child.is_dir() and read_manifest(child) is not None:
            found.append((step, child))
    return sorted(found)


def latest_published(parent: Path, prefix: str) -> tuple[int, Path] | None:
    """The newest published ``(step, path)`` under ``parent``, or None."""
    published = list_published(parent, prefix)
    return published[-1] if published else None


def replace_published(final: Path, save: Callable[[Path], None], manifest: dict[str, Any]) -> Path:
    """Publishes what ``save(staging)`` writes as ``final`` (a stage's output such as ``ict/retriever``), replacing
    an older one: the old folder is unpublished first, so a crash in between leaves none rather than a torn one."""
    final = Path(final)
    if final.exists():
        remove_folder(final)
    staging = new_staging(final.parent)
    try:
        save(staging)
        return publish_folder(staging, final, {**manifest, "created": now_iso()})
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def remove_folder(folder: Path) -> None:
    """Deletes a published folder: first renamed to a staging name (unpublished at once), then removed."""
    folder = Path(folder)
    trash = folder.parent / f"{STAGING_PREFIX}{uuid.uuid4().hex}"
    os.rename(folder, trash)
    shutil.rmtree(trash, ignore_errors=True)


def prune(parent: Path, prefix: str, keep: int) -> list[Path]:
    """Removes all but the newest ``keep`` published folders, never the one ``parent/CURRENT`` names.

    Returns the removed paths. Readers that still hold files of a removed version (mmap, open index) keep working.
    """
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    current = read_pointer(Path(parent) / CURRENT)
    removed = []
    for _, path in list_published(parent, prefix)[:-keep]:
        if path.name != current:
            remove_folder(path)
            removed.append(path)
    return removed


def clean_staging(parent: Path) -> list[Path]:
    """Removes leftover ``.staging-*`` folders and files under ``parent`` (crashed writers); returns them.

    Only the single writer of ``parent`` may call this, and only when it is not writing (e.g. at start).
    """
    parent = Path(parent)
    if not parent.is_dir():
        return []
    removed = []
    for child in parent.iterdir():
        if child.name.startswith(STAGING_PREFIX):
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)
            removed.append(child)
    return removed


def write_pointer(path: Path, name: str) -> None:
    """Atomically makes the text file ``path`` (e.g. ``index/CURRENT``) contain ``name``."""
    # note: the temporary name carries the staging prefix, so a crash leftover is cleaned like any staging folder
    write_text_atomic(path, name + "\n", tmp_prefix=STAGING_PREFIX)


def read_pointer(path: Path) -> str | None:
    """The name a pointer file holds, or None when it does not exist or is empty."""
    try:
        name = Path(path).read_text().strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return name or None


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file, read in chunks (fine for multi-GB embeddings)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def file_entries(folder: Path, names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """``{name: {"sha256": ..., "size": ...}}`` for manifests."""
    return {name: {"sha256": sha256_file(folder / name), "size": (folder / name).stat().st_size} for name in names}


def check_files(folder: Path, entries: dict[str, dict[str, Any]], verify_checksums: bool = True) -> list[str]:
    """Problems found comparing files under ``folder`` with manifest ``entries`` (empty when all match)."""
    problems = []
    for name, entry in entries.items():
        path = Path(folder) / name
        if not path.is_file():
            problems.append(f"{name} is missing")
        elif path.stat().st_size != entry.get("size"):
            problems.append(f"{name} has {path.stat().st_size} bytes, manifest says {entry.get('size')}")
        elif verify_checksums and sha256_file(path) != entry.get("sha256"):
            problems.append(f"{name} does not match its sha256 in the manifest")
    return problems


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Holds an exclusive ``flock`` on ``path`` (released by the kernel even on SIGKILL).

    Raises ``RuntimeError`` at once if another process holds it: two writers of one folder would clean each
    other's staging folders.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"{path} is locked by another process (is another index builder running?)") from None
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


# ---------------------------------------------------------------------------------------------- run-level markers


def checkpoints_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINTS_DIR


def retriever_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / RETRIEVER_DIR


def index_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / INDEX_DIR


def mark_done(run_dir: str | Path) -> None:
    """Written by the trainer when it finishes (after its last retriever export), so the builder can exit."""
    write_pointer(Path(run_dir) / DONE, now_iso())


def clear_done(run_dir: str | Path) -> None:
    """Removed by a trainer that (re)starts, so builders keep serving a resumed run."""
    (Path(run_dir) / DONE).unlink(missing_ok=True)


def is_done(run_dir: str | Path) -> bool:
    return (Path(run_dir) / DONE).is_file()


# ---------------------------------------------------------------------------------------------- retriever exports


def _weights_sha256(embedder_dir: Path) -> str:
    """SHA-256 of the embedder's safetensors (one file, or the sorted shards hashed together)."""
    single = embedder_dir / "model.safetensors"
    if single.is_file():
        return sha256_file(single)
    shards = sorted(embedder_dir.glob("*.safetensors"))
    if not shards:
        raise FileNotFoundError(f"no safetensors weights under {embedder_dir}")
    return hashlib.sha256("".join(sha256_file(s) for s in shards).encode()).hexdigest()


def export_retriever(
    run_dir: str | Path,
    step: int,
    retriever: Retriever,
    *,
    blocks_path: str,
    tokenizer_path: str,
    max_block_length: int,
) -> Path:
    """Publishes ``retriever/step-{step:08d}``: everything the builder needs to re-embed the corpus.

    Call from the main process only. Re-exporting a step (after a resume) with identical doc-embedder weights
    returns the existing folder; with different weights the old export is replaced (an index already built from it
    keeps its own ``weights_sha256``).
    """
    parent = retriever_dir(run_dir)
    final = parent / folder_name(RETRIEVER_PREFIX, step)
    staging = new_staging(parent)
    try:
        retriever.save_pretrained(staging)
        weights = _weights_sha256(staging / "doc")
        existing = read_manifest(final)
        if existing is not None and existing.get("weights_sha256") == weights:
            shutil.rmtree(staging)
            return final
        if final.exists():
            logger.warning("replacing retriever export %s (different weights at the same step)", final)
            remove_folder(final)
        # note: a tokenizer may be a hub name rather than a folder; only local paths are made absolute
        tokenizer = str(Path(tokenizer_path).resolve()) if Path(tokenizer_path).exists() else tokenizer_path
        manifest = {
            "step": step,
            "blocks": str(Path(blocks_path).resolve()),
            "tokenizer": tokenizer,
            "max_block_length": max_block_length,
            "weights_sha256": weights,
            "created": now_iso(),
        }
        return publish_folder(staging, final, manifest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def latest_retriever_export(run_dir: str | Path) -> tuple[int, Path, dict[str, Any]] | None:
    """``(step, path, manifest)`` of the newest complete retriever export, or None."""
    for step, path in reversed(list_published(retriever_dir(run_dir), RETRIEVER_PREFIX)):
        manifest = read_manifest(path)
        if manifest is not None:  # note: it may have been pruned since it was listed
            return step, path, manifest
    return None


# ---------------------------------------------------------------------------------------------- index versions

EMBEDDINGS_FILE = "embeddings.npy"
FAISS_FILE = "index.faiss"
BLOCK_IDS_FILE = "block_ids.npy"
INDEX_FILES = (EMBEDDINGS_FILE, FAISS_FILE, BLOCK_IDS_FILE)


class IndexVersionError(RuntimeError):
    """An index version that is unpublished, partial or corrupt; the message names the folder and the problem."""


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


def set_current_index(run_dir: str | Path, version: Path) -> None:
    """Makes ``version`` (a published ``index/v-*`` folder) the live index."""
    if read_manifest(version) is None:
        raise IndexVersionError(f"{version}: not a published index version, refusing to make it CURRENT")
    write_pointer(index_dir(run_dir) / CURRENT, Path(version).name)


def current_index_version(run_dir: str | Path) -> Path | None:
    """The folder ``index/CURRENT`` names, or None when no index has been published yet."""
    name = read_pointer(index_dir(run_dir) / CURRENT)
    return None if name is None else index_dir(run_dir) / name


@dataclass(slots=True)
class PublishedIndex:
    """A loaded, verified index version; ``search`` returns block ids (row numbers of the blocks dataset)."""

    step: int
    """Retriever step whose document embedder produced the embeddings."""
    path: Path
    index: FaissIndex
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
    expected = (manifest["num_vectors"], manifest["dim"])
    if (index.num_vectors, index.dim) != expected or block_ids.shape != (expected[0],):
        raise IndexVersionError(
            f"{path}: FAISS index holds {index.num_vectors} x {index.dim} and block_ids {block_ids.shape}, "
            f"manifest says {expected[0]} x {expected[1]}"
        )
    return PublishedIndex(step=int(manifest["step"]), path=path, index=index, manifest=manifest, block_ids=block_ids)
