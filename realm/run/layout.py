"""The layout of a run directory, the only thing the trainer and the index builder share, and the retriever exports
the trainer publishes in it for the builder.

```
RUN/
  config.yaml                   resolved configuration (trainer; CONFIG_FILE)
  metrics.jsonl                 one JSON record per logged step, appended (trainer; METRICS_FILE; `realm report`)
  retrievals.jsonl              retrieval tables every tracking.inspect_interval steps, appended (trainer;
                                RETRIEVALS_FILE)
  summary.json                  the end figures of a pipeline (`realm demo`, `realm real-text`; SUMMARY_FILE)
  checkpoints/step-00000500/    training state (trainer; realm.training.checkpoint); its manifest's index_step and
                                export_step pin the exports and index versions it resumes on (pinned_steps)
  checkpoints/step-N.<why>/     a checkpoint a resume set aside (failed-verification, superseded)
  retriever/step-00000500/      doc-embedder weights for the builder: Retriever.save_pretrained layout + manifest.json
  index/v-00000500/             embeddings.npy [N, D] float32, index.faiss, block_ids.npy, manifest.json written LAST
                                (realm.index.versions)
  index/CURRENT                 name of the live version folder, replaced atomically with os.replace
  index/.staging-<uuid>/        a build in progress: never read, removed when the builder starts
  index/BUILD_FAILED            why the builder gave up on a build (JSON; BUILD_FAILED, realm.index.build_failure):
                                written atomically before it exits, removed when a builder starts; a trainer waiting
                                for an index stops with its reason
  index/BUILDER_HEARTBEAT       touched every few seconds while a builder holds the run (BUILDER_HEARTBEAT,
                                realm.index.builder_heartbeat); a trainer waiting for an index waits on while it moves
  index/BUILDER_HOLD            while it exists, the trainer's child builder has started but waits before it takes the
                                run (BUILDER_HOLD): the trainer is still setting up and clearing what a killed run left
  */.trash-<uuid>/              a removal a kill cut short: never read, removed by any process (clean_trash)
  DONE                          the trainer has finished, so a standalone builder may exit
  .trainer.lock                 held by the run's trainer (one per run; TRAINER_LOCK), its pid written in it
```

Every folder is published by the rule of ``realm.run.publication``; which index version is live, and who may remove
a published folder, is ``realm.run.live_index``. A run can move (another mount, another node): the paths it records
(``config.yaml``, the manifests) are read back where they are now by the rule of ``realm.run.paths``.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from realm.core.atomic import disk_writes
from realm.core.errors import RunError
from realm.run.paths import RUN_ROOT, record_path, run_root
from realm.run.publication import (
    check_files,
    file_entries,
    folder_name,
    list_published,
    new_staging,
    now_iso,
    prune,
    publish_folder,
    read_manifest,
    relative_files,
    remove_folder,
    sha256_file,
    write_pointer,
)

if TYPE_CHECKING:
    from realm.models.retriever import Retriever

logger = logging.getLogger(__name__)


CHECKPOINTS_DIR, CHECKPOINT_PREFIX = "checkpoints", "step-"
RETRIEVER_DIR, RETRIEVER_PREFIX = "retriever", "step-"
INDEX_DIR, INDEX_PREFIX = "index", "v-"
BUILD_FAILED = "BUILD_FAILED"
BUILDER_HEARTBEAT = "BUILDER_HEARTBEAT"
BUILDER_HOLD = "BUILDER_HOLD"
DONE = "DONE"
CONFIG_FILE, METRICS_FILE, RETRIEVALS_FILE = "config.yaml", "metrics.jsonl", "retrievals.jsonl"
SUMMARY_FILE = "summary.json"
TRAINER_LOCK = ".trainer.lock"
INDEX_STEP = "index_step"
"""Field of a checkpoint's manifest: the index version (retriever step) the trainer searched when it saved, which a
run resumed from it searches again."""
EXPORT_STEP = "export_step"
"""Field of a checkpoint's manifest: the newest retriever export when it was saved (its own step, at a refresh step),
the version the steps after it wait for once the index they search is too stale."""


def checkpoints_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINTS_DIR


def retriever_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / RETRIEVER_DIR


def index_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / INDEX_DIR


def pinned_steps(run_dir: str | Path) -> set[int]:
    """The index versions the published checkpoints resume on and wait for next (``INDEX_STEP``, ``EXPORT_STEP``):
    their retriever exports and index versions are never pruned (by the trainer's ``keep_exports``, the builder's
    ``keep_versions`` or its removal of older exports), so a run resumed from any checkpoint, including one saved
    between two refreshes or at one, searches exactly the indexes an uninterrupted run searched."""
    pinned = set()
    for _, path in list_published(checkpoints_dir(run_dir), CHECKPOINT_PREFIX):
        manifest = read_manifest(path) or {}
        # note: the export too: a checkpoint saved at a refresh step searched the previous version, and the steps
        # after it (past max_staleness, or at their swap_lag step) wait for the export it had just made
        pinned.update(step for step in (manifest.get(INDEX_STEP), manifest.get(EXPORT_STEP)) if isinstance(step, int))
    return pinned


def has_version(run_dir: str | Path, step: int) -> bool:
    """Whether index version ``step`` is published, or its retriever export (from which the builder builds it)."""
    return any(
        read_manifest(parent / folder_name(prefix, step)) is not None
        for parent, prefix in ((index_dir(run_dir), INDEX_PREFIX), (retriever_dir(run_dir), RETRIEVER_PREFIX))
    )


def mark_done(run_dir: str | Path) -> None:
    """Written by the trainer when it finishes (after its last retriever export), so the builder can exit."""
    write_pointer(Path(run_dir) / DONE, now_iso())


def clear_done(run_dir: str | Path) -> None:
    """Removed by a trainer that (re)starts, so builders keep serving a resumed run."""
    (Path(run_dir) / DONE).unlink(missing_ok=True)


def is_done(run_dir: str | Path) -> bool:
    return (Path(run_dir) / DONE).is_file()


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
    keep: int = 0,
) -> Path:
    """Publishes ``retriever/step-{step:08d}``: everything the builder needs to re-embed the corpus.

    Call from the main process only. With ``keep``, only the newest ``keep`` exports stay (and those checkpoints
    pin). Re-exporting a step (after a resume) with identical doc-embedder weights
    returns the existing folder; with different weights the old export is replaced (an index already built from it
    keeps its own ``weights_sha256``).
    """
    parent = retriever_dir(run_dir)
    final = parent / folder_name(RETRIEVER_PREFIX, step)
    staging = new_staging(parent)
    try:
        with disk_writes(staging):
            retriever.save_pretrained(staging)
        weights = _weights_sha256(staging / "doc")
        existing = read_manifest(final)
        if existing is not None and existing.get("weights_sha256") == weights:
            shutil.rmtree(staging)
            return final
        if final.exists():
            logger.warning("replacing retriever export %s (different weights at the same step)", final)
            remove_folder(final)
        # note: inputs inside the run are recorded relative to it, others absolute, a hub tokenizer as given; the
        # builder reads them back where they are now, even after the run moved (realm.run.paths)
        manifest = {
            "step": step,
            "blocks": record_path(blocks_path, run_dir),
            "tokenizer": record_path(tokenizer_path, run_dir),
            RUN_ROOT: run_root(final, run_dir),
            "max_block_length": max_block_length,
            "weights_sha256": weights,
            "files": file_entries(staging, relative_files(staging)),
            "created": now_iso(),
        }
        published = publish_folder(staging, final, manifest)
        if keep:
            prune(parent, RETRIEVER_PREFIX, keep, keep_steps=pinned_steps(run_dir))
        return published
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def check_export(path: str | Path) -> None:
    """Raises ``RunError`` unless ``path`` is a published export whose document weights match its ``weights_sha256``."""
    manifest = read_manifest(Path(path))
    if manifest is None:
        raise RunError(f"{path}: not a published retriever export (no readable manifest)")
    try:
        found = _weights_sha256(Path(path) / "doc")
    except OSError as err:
        raise RunError(f"{path}: cannot read the exported weights: {err}") from err
    if found != manifest.get("weights_sha256"):
        raise RunError(f"{path}: document weights do not match the export's weights_sha256 (corrupt export); not used")
    # note: the document weights were just hashed for weights_sha256; hash only the other files again
    others = {name: entry for name, entry in manifest.get("files", {}).items() if not name.startswith("doc/")}
    problems = check_files(Path(path), others)
    if problems:
        raise RunError(f"{path}: {'; '.join(problems)} (corrupt export); not used")


def latest_retriever_export(run_dir: str | Path) -> tuple[int, Path, dict[str, Any]] | None:
    """``(step, path, manifest)`` of the newest complete retriever export, or None."""
    for step, path in reversed(list_published(retriever_dir(run_dir), RETRIEVER_PREFIX)):
        manifest = read_manifest(path)
        if manifest is not None:  # note: it may have been pruned since it was listed
            return step, path, manifest
    return None
