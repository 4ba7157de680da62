"""Random access to a blocks dataset's wordpieces and texts by block id (row), and the uid hashes that identify a
block across corpora and index versions."""

from __future__ import annotations

import hashlib
from typing import Sequence

import datasets
import numpy as np

from realm.data.packing import Ragged


def uid_hash(uid: str) -> int:
    """A positive int64 key for a block uid (any string); 0 is reserved for "no source".

    Comparing 8-byte keys instead of 40-character strings keeps a 13M-block corpus's uid table at ~100 MB.
    """
    if not uid:
        return 0
    digest = hashlib.blake2b(uid.encode("utf-8"), digest_size=8).digest()
    return (int.from_bytes(digest, "little") & ((1 << 62) - 1)) or 1


class BlockStore:
    """Random access to block wordpieces by block id (row of the blocks dataset).

    Corpora up to ``in_memory_limit`` blocks are held as one flat int32 array of wordpieces per column with offsets
    (4 bytes a wordpiece: 0.23 GB at the 200k-block limit with 288-wordpiece blocks; Python lists took ~15 KB a
    block); larger ones are read from the memory-mapped Arrow table on demand, so a 13M-block corpus costs only its
    uid-hash array (8 bytes a block) in RAM.
    """

    def __init__(self, blocks: datasets.Dataset, *, in_memory_limit: int = 200_000) -> None:
        self.blocks = blocks
        self.uid_hashes = np.fromiter((uid_hash(u) for u in blocks["uid"]), dtype=np.int64, count=len(blocks))
        self._titles: Ragged | None = None
        self._bodies: Ragged | None = None
        self._text_columns = blocks.select_columns(["title", "text"])
        # note: a read by rows formats every column it holds; the uid, texts and doc ids of a 300k-block corpus were
        # read with each chunk of token lists. Arrow out, so that no Python list of wordpieces is made
        self._token_columns = blocks.select_columns(["title_ids", "body_ids"]).with_format("arrow")
        if len(blocks) <= in_memory_limit:
            # note: not blocks["x"], which datasets 4+ returns as a lazy Column that reads Arrow at each row it is
            # indexed by (a fifth of a small model's step went there)
            table = self._token_columns[:]
            self._titles, self._bodies = (_int32(Ragged.from_arrow(table.column(c))) for c in ("title_ids", "body_ids"))

    def __len__(self) -> int:
        return len(self.blocks)

    def ragged(self, block_ids: Sequence[int] | np.ndarray) -> tuple[Ragged, Ragged]:
        """(title wordpieces, body wordpieces) of each block, flat (what the packers take)."""
        ids = np.asarray(block_ids, dtype=np.int64).reshape(-1)
        if len(ids) and ids.min() < 0:
            raise ValueError(f"block ids must be >= 0 (a missing block is the caller's to leave out), got {ids.min()}")
        if self._titles is not None and self._bodies is not None:
            return self._titles.take(ids), self._bodies.take(ids)
        if len(ids) == 0:
            return Ragged.of([]), Ragged.of([])
        table = self._token_columns[ids]
        return Ragged.from_arrow(table.column("title_ids")), Ragged.from_arrow(table.column("body_ids"))

    def tokens(self, block_ids: Sequence[int] | np.ndarray) -> tuple[list[list[int]], list[list[int]]]:
        """(title wordpieces, body wordpieces) of each block, as lists."""
        titles, bodies = self.ragged(block_ids)
        return titles.to_lists(), bodies.to_lists()

    def texts(self, block_ids: Sequence[int]) -> tuple[list[str], list[str]]:
        """(titles, body texts) of each block, read from the Arrow table (QA answer checks and predictions)."""
        if len(block_ids) == 0:
            return [], []
        rows = self._text_columns[[int(i) for i in block_ids]]
        return rows["title"], rows["text"]


def _int32(sequences: Ragged) -> Ragged:
    """4 bytes a wordpiece (datasets stores Python ints as int64)."""
    return Ragged(sequences.values.astype(np.int32), sequences.offsets)
