"""Malformed input records: refuse one with its file:line, or skip it and count it, then report the count.

One rule for every reader of user files (corpora, QA sets): nothing is dropped silently. Without ``skip_malformed``
the first bad record raises a ``DataFileError`` (or the reader's subclass) that says what and where; with it, the
record is counted in ``stats.num_malformed`` and the count is logged once the file is read.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Protocol

from realm.core.errors import DataFileError

logger = logging.getLogger(__name__)


class ReadCounts(Protocol):
    num_records: int
    num_malformed: int


def reject(where: str, reason: str, skip_malformed: bool, stats: ReadCounts,
           error: type[DataFileError] = DataFileError) -> None:  # fmt: skip
    """Raises ``error("where: reason")``, or with ``skip_malformed`` counts the record as skipped."""
    if not skip_malformed:
        raise error(f"{where}: {reason}")
    stats.num_malformed += 1
    logger.debug("skipping %s: %s", where, reason)


def report(source: str | Path, stats: ReadCounts, noun: str = "records") -> None:
    """Logs what a reader read and skipped (a warning when it skipped any)."""
    log = logger.warning if stats.num_malformed else logger.info
    log("%s: read %d %s, skipped %d malformed", source, stats.num_records, noun, stats.num_malformed)


def existing_file(path: str | Path, what: str) -> Path:
    """``path`` as a Path, or ``FileNotFoundError("<what> file not found: path")``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} file not found: {path}")
    return path
