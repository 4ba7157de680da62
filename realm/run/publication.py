"""Crash-safe publication of folders: the one rule every published folder of a run follows.

A folder is written under ``.staging-<uuid>``, its files are fsynced, ``manifest.json`` is written last, and only then
is the folder renamed to its final name. Readers list only folders whose manifest parses, so a crash at any point
leaves either nothing or a complete folder. Published folders are never modified in place; they are only removed
whole (renamed back to a staging name first, so a crash mid-delete cannot leave a manifest next to missing files).
A pointer file (``CURRENT``) names the live folder of a parent and is replaced atomically with ``os.replace``.
Where each kind of folder lives in a run is ``realm.run.layout``'s business.
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
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from realm.core.atomic import disk_writes, fsync_path, write_text_atomic
from realm.core.errors import RunError
from realm.run.paths import PUBLISHED_AT, resolve_manifest

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
STAGING_PREFIX = ".staging-"
TRASH_PREFIX = ".trash-"
CURRENT = "CURRENT"


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
    staging = parent / f"{STAGING_PREFIX}{uuid.uuid4().hex}"
    with disk_writes(parent):
        parent.mkdir(parents=True, exist_ok=True)
        staging.mkdir()
    return staging


def publish_folder(staging: Path, final: Path, manifest: dict[str, Any]) -> Path:
    """Commits ``staging`` as ``final``: fsync its files, write ``manifest.json`` last, fsync, rename.

    Raises ``FileExistsError`` if ``final`` exists (published folders are immutable; on Linux ``rename`` would
    silently replace an empty directory, hence the explicit check). Assumes one writer per parent folder. The
    manifest records where it was published (``PUBLISHED_AT``), from which a reader finds its paths after a move.
    """
    staging, final = Path(staging), Path(final)
    manifest = {**manifest, PUBLISHED_AT: os.path.abspath(final)}
    if final.exists():
        raise FileExistsError(f"{final} already exists; published folders are never overwritten")
    if (staging / MANIFEST).exists():
        raise ValueError(f"{staging} already holds a {MANIFEST}; it must be written last, by publish_folder")
    with disk_writes(final.parent):
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
    """The parsed ``manifest.json`` of ``folder``, or None when it is missing or unreadable (= not published); the
    paths it records are where they are now, even when the run has moved (``realm.run.paths.resolve_manifest``)."""
    try:
        data = json.loads((Path(folder) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return resolve_manifest(data, folder) if isinstance(data, dict) else None


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
        files = file_entries(staging, relative_files(staging))
        return publish_folder(staging, final, {**manifest, "files": files, "created": now_iso()})
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def remove_folder(folder: Path) -> None:
    """Deletes a published folder: first renamed to a trash name (unpublished at once), then removed. A folder already
    gone (another process pruned it first) counts as removed; a kill between the two steps leaves a ``.trash-*``
    folder that anyone may delete (``clean_trash``), since nothing ever writes to it."""
    folder = Path(folder)
    trash = folder.parent / f"{TRASH_PREFIX}{uuid.uuid4().hex}"
    try:
        os.rename(folder, trash)
    except FileNotFoundError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def prune(parent: Path, prefix: str, keep: int, keep_steps: set[int] | frozenset[int] = frozenset()) -> list[Path]:
    """Removes all but the newest ``keep`` published folders, never the one ``parent/CURRENT`` names nor those of
    ``keep_steps`` (what checkpoints need, ``realm.run.layout.pinned_steps``).

    Returns the removed paths. Readers that still hold files of a removed version (mmap, open index) keep working.
    """
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    current = read_pointer(Path(parent) / CURRENT)
    removed = []
    for step, path in list_published(parent, prefix)[:-keep]:
        if path.name != current and step not in keep_steps:
            remove_folder(path)
            removed.append(path)
    return removed


def clean_trash(parent: Path) -> list[Path]:
    """Removes the ``.trash-*`` folders under ``parent`` (removals a kill interrupted); safe for any process at any
    time, unlike ``clean_staging``."""
    return _remove_children(parent, TRASH_PREFIX)


def clean_staging(parent: Path) -> list[Path]:
    """Removes leftover ``.staging-*`` folders and files under ``parent`` (crashed writers), and trash; returns them.

    Only the single writer of ``parent`` may call this, and only when it is not writing (e.g. at start).
    """
    return _remove_children(parent, STAGING_PREFIX) + clean_trash(parent)


def _remove_children(parent: Path, prefix: str) -> list[Path]:
    parent = Path(parent)
    if not parent.is_dir():
        return []
    removed = []
    for child in parent.iterdir():
        if child.name.startswith(prefix):
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


def relative_files(folder: Path) -> list[str]:
    """Every file under ``folder`` as a path relative to it, sorted (what a manifest lists)."""
    return sorted(str(p.relative_to(folder)) for p in Path(folder).rglob("*") if p.is_file())


def file_entries(folder: Path, names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """``{name: {"sha256": ..., "size": ...}}`` for manifests."""
    return {name: {"sha256": sha256_file(folder / name), "size": (folder / name).stat().st_size} for name in names}


def manifest_problems(folder: str | Path) -> list[str]:
    """What is wrong with the published ``folder``: no readable manifest, or files that do not match the sizes and
    sha256 it lists (empty when all match)."""
    manifest = read_manifest(Path(folder))
    if manifest is None:
        return [f"no readable {MANIFEST}"]
    return check_files(Path(folder), manifest.get("files", {}))


def verify_published(folder: str | Path) -> None:
    """Raises ``RunError`` unless ``folder`` is published and every file its manifest lists matches its checksum.
    A folder that is not published at all (e.g. a hub model name or a plain ``save_pretrained`` folder) is left to
    its loader."""
    if not Path(folder).is_dir() or read_manifest(Path(folder)) is None:
        return
    problems = manifest_problems(folder)
    if problems:
        raise RunError(f"{folder}: {'; '.join(problems)} (corrupt); not used")


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


class RunInUseError(RunError):
    """A lock of a run held by another live process (a second trainer or index builder on one run directory)."""


@contextlib.contextmanager
def exclusive_lock(path: Path, timeout_s: float = 0.0, refusal: str = "") -> Iterator[None]:
    """Holds an exclusive ``flock`` on ``path`` (released by the kernel when its holder dies, even on SIGKILL), with
    the holder's pid written in it.

    Raises ``RunInUseError`` (a user error: one line, exit code 2) if another process still holds it after
    ``timeout_s``: ``refusal`` (what that means, e.g. "run directory R is in use by another trainer"), then the
    holder's pid and the lock file. Two writers of one folder would clean each other's staging folders. The wait
    covers a holder that is shutting down (an orphaned builder).
    """
    path = Path(path)
    with disk_writes(path):  # note: a lock is the first write of a process to its run: a read-only one fails here
        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(path, "a+")
    deadline = time.monotonic() + timeout_s
    with f:
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    f.seek(0)
                    pid = f.read().strip() or "unknown"
                    message = refusal or "locked by another process"
                    raise RunInUseError(f"{message} (pid {pid} holds {path})") from None
                time.sleep(0.2)
        # note: the pid is only for the message of a process refused while this one holds the lock (a holder that
        # died leaves its pid behind, but then the lock is free and the next holder writes its own)
        with disk_writes(path):
            f.seek(0)
            f.truncate()
            f.write(f"{os.getpid()}\n")
            f.flush()
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


# ---------------------------------------------------------------------------------------------- run-level markers














# ---------------------------------------------------------------------------------------------- retriever exports








# ---------------------------------------------------------------------------------------------- index versions















