"""Atomic file replacement, and the one translation of a write that fails for want of space or permission.

A replaced file's text goes to a temporary name in the same folder, is fsynced, and is renamed over the target with
``os.replace``; the folder is fsynced too, so the rename survives a crash: a reader sees the old file or the whole new
one, never half of one.

Every write point of a run (checkpoints, configs, retriever exports, index versions and their embeddings) runs inside
``disk_writes(path)``: a full disk or quota, a read-only mount or a folder the user may not write is then one line
naming the path (``DiskError``) instead of a traceback. Everything is published by rename, so nothing half-written is
ever read, and the run resumes from what it last published once there is space again. A file whose size is known
before it is written is checked with ``check_free_space`` first: a memory map on a full disk ends the process with
SIGBUS, not an error. Standard library only, so light modules (the world generator) can use it without importing torch.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import uuid
from pathlib import Path
from typing import Iterator

from realm.core.errors import DiskError, UserError

_REMEDIES = {
    errno.ENOSPC: "free space there",
    errno.EDQUOT: "free space there (or raise the quota)",
    errno.EROFS: "make it writable",
    errno.EACCES: "make it writable",
}
"""The errors of a write that the user can fix, and how."""
_RESUMES = "and run it again: the run resumes from what it last published"
_NO_SPACE_LEFT_BYTES = 1 << 20
"""Free bytes below which a writer that reports no errno (``opaque_writer``) is taken to have run out of space."""


def _size(num_bytes: int) -> str:
    value, unit = float(num_bytes), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            break
        value /= 1024
    return f"{value:.1f} {unit}"


def _disk_error(where: str | Path, code: int, what: str = "") -> DiskError:
    problem = what or os.strerror(code).lower()
    error = DiskError(f"{where}: {problem} ({errno.errorcode[code]}); {_REMEDIES[code]} {_RESUMES}")
    error.errno = code
    return error


def _free_bytes(path: Path) -> int | None:
    """Free bytes on the disk holding ``path`` (its nearest existing folder), or None when that cannot be read."""
    folder = next((p for p in (path, *path.parents) if p.exists()), None)
    try:
        return shutil.disk_usage(folder).free if folder is not None else None
    except OSError:
        return None


def check_free_space(path: str | Path, num_bytes: int) -> None:
    """Raises ``DiskError`` (ENOSPC) when the disk that is to hold ``path`` has less than ``num_bytes`` free."""
    free = _free_bytes(Path(path))
    if free is not None and free < num_bytes:
        raise _disk_error(path, errno.ENOSPC, f"needs {_size(num_bytes)} but only {_size(free)} are free on its disk")


@contextlib.contextmanager
def disk_writes(path: str | Path, *, opaque_writer: bool = False) -> Iterator[None]:
    """Runs a write to ``path`` (a file, or the folder written into): an error for want of space or permission becomes
    a ``DiskError`` naming the file (the OS's, when it lies inside ``path``; else ``path``); any other passes through.

    Libraries that report the OS error only in their text (faiss's ``RuntimeError``, safetensors) are read by it.
    ``opaque_writer``: the block runs a writer that says nothing of why a write failed (``torch.save``: "unexpected
    pos"), so any error it raises on a disk left with no space is taken as the disk's.
    """
    try:
        yield
    except UserError:
        raise
    except OSError as err:
        if err.errno not in _REMEDIES:
            raise
        inside = err.filename is not None and Path(os.fsdecode(err.filename)).is_relative_to(path)
        raise _disk_error(os.fsdecode(err.filename) if inside else path, err.errno) from err
    except Exception as err:
        text = str(err).lower()
        code = next((c for c in _REMEDIES if os.strerror(c).lower() in text), None)
        if code is None and opaque_writer:
            free = _free_bytes(Path(path))
            code = errno.ENOSPC if free is not None and free < _NO_SPACE_LEFT_BYTES else None
        if code is None:
            raise
        raise _disk_error(path, code) from err


def fsync_path(path: Path) -> None:
    """fsync a file or folder (a folder's fsync makes renames inside it durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text_atomic(path: str | Path, text: str, *, tmp_prefix: str = ".") -> None:
    """Replaces ``path`` with ``text`` (UTF-8, ``\\n`` line ends) atomically and durably."""
    path = Path(path)
    tmp = path.parent / f"{tmp_prefix}{path.name}-{uuid.uuid4().hex}.tmp"
    with disk_writes(path):
        try:
            with open(tmp, "w", encoding="utf-8", newline="\n") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        fsync_path(path.parent)
