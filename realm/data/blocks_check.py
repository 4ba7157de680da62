"""Saved blocks read back whole: an Arrow file cut short or unreadable, and wordpiece ids outside the vocabulary, are
reported where the blocks are loaded, as one line naming the file, rather than deep inside a job.

Without these checks a copy cut short surfaced as pyarrow's ``OSError`` (or, cut right after its schema, as no rows at
all), and four flipped bytes in an id as ``IndexError: index out of range in self`` in the embedder, thousands of steps
from the cause. Either way the remedy is to cut the blocks again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from realm.data.corpus import CorpusError

RECUT = "cut them again with `realm blocks`"
STATS_FILE = "corpus_stats.json"
"""Written beside the Arrow files by ``save_blocks``; its ``num_blocks`` is how many rows they must hold."""


def read_saved_blocks(path: Path) -> datasets.Dataset:
    """``datasets.load_from_disk(path)``; an Arrow file that cannot be read, or fewer rows than ``STATS_FILE`` counts,
    is a ``CorpusError`` naming it."""
    try:
        blocks = datasets.load_from_disk(str(path))
    except (OSError, pa.ArrowException) as err:
        where = _unreadable_file(path) or path
        raise CorpusError(f"{where}: unreadable ({' '.join(str(err).split())}); {RECUT}") from None
    stats = path / STATS_FILE
    try:
        expected = json.loads(stats.read_text()).get("num_blocks") if stats.is_file() else None
    except (ValueError, AttributeError) as err:  # not JSON, or not an object
        raise CorpusError(f"{stats}: unreadable ({err}); {RECUT}") from None
    if expected is not None and expected != len(blocks):
        # note: pyarrow reads a stream cut at a record batch's end without an error, as fewer rows
        raise CorpusError(f"{path} holds {len(blocks)} blocks, but {STATS_FILE} says {expected} (an Arrow file cut "
                          f"short?); {RECUT}")  # fmt: skip
    return blocks


def _unreadable_file(path: Path) -> Path | None:
    """The first Arrow file of ``path`` that pyarrow cannot read through (only looked for once loading failed)."""
    for file in sorted(path.glob("*.arrow")):
        try:
            with pa.memory_map(str(file)) as source:
                pa.ipc.open_stream(source).read_all()
        except (OSError, pa.ArrowException):
            return file
    return None


def check_token_ids(blocks: datasets.Dataset, columns: Sequence[str], vocab_size: int, where: str,
                    vocabulary: str) -> None:  # fmt: skip
    """Raises ``CorpusError`` naming the first block (row) with a wordpiece id outside ``[0, vocab_size)`` in one of
    ``columns`` (lists of ids): flipped bytes, or blocks cut with another tokenizer than ``vocabulary``.

    One vectorised pass (min and max) over each column of the memory-mapped table, a few seconds for 13M blocks; the
    block is looked for only when an id is out of range.
    """
    found = []
    for column in columns:
        ids = blocks.data.column(column)
        bounds = pc.min_max(pc.list_flatten(ids)).as_py()
        if bounds["min"] is not None and (bounds["min"] < 0 or bounds["max"] >= vocab_size):
            found.append((*_first_out_of_range(ids, vocab_size), column))
    if found:
        row, value, column = min(found)
        raise CorpusError(
            f"{where}: block {row} holds wordpiece id {value} in {column}, outside the {vocab_size} entries of "
            f"{vocabulary} (corrupt, or cut with another tokenizer): {RECUT}"
        )


def _first_out_of_range(ids: pa.ChunkedArray, vocab_size: int) -> tuple[int, int]:
    """(row, id) of the first id outside ``[0, vocab_size)`` in a column of id lists (one is known to be there)."""
    start = 0
    for chunk in ids.chunks:
        values = chunk.flatten().to_numpy()
        bad = np.flatnonzero((values < 0) | (values >= vocab_size))
        if len(bad):
            # note: a chunk may be a slice of its buffers, so its offsets are made relative to its first list
            offsets = chunk.offsets.to_numpy()
            row = int(np.searchsorted(offsets - offsets[0], bad[0], side="right")) - 1
            return start + row, int(values[bad[0]])
        start += len(chunk)
    raise RuntimeError("min_max found an id out of range that no chunk holds")
