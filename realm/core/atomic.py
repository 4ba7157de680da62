"""Atomic file replacement: a reader sees the old file or the whole new one, never half of one.

The text goes to a temporary name in the same folder, is fsynced, and is renamed over the target with
``os.replace``; the folder is fsynced too, so the rename survives a crash. Standard library only, so light modules
(the world generator) can use it without importing torch.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path


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
