"""Assembling wordpiece sequences: the one place that knows REALM's input layouts.

- document embedder:  ``[CLS] title [SEP] body [SEP]``
- query embedder:     ``[CLS] query [SEP]``
- knowledge-augmented encoder: ``[CLS] masked query [SEP] body [SEP]`` (the original drops the title here)

Token ids arrive without special tokens; callers pass the special ids of their tokenizer. ``contains_run`` searches
such sequences: DPR's "the answer is in the passage" on wordpiece ids (the pre-training candidates' answer recall) and
on normalised word tokens (QA retrieval accuracy) alike.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from torch import Tensor


@dataclass(frozen=True, slots=True)
class SpecialIds:
    """The special wordpieces a tokenizer uses."""

    cls: int
    sep: int
    pad: int
    mask: int

    @classmethod
    def of(cls, tokenizer) -> "SpecialIds":
        return cls(
            cls=tokenizer.cls_token_id,
            sep=tokenizer.sep_token_id,
            pad=tokenizer.pad_token_id,
            mask=tokenizer.mask_token_id,
        )


def pack_pair(
    first: Sequence[int], second: Sequence[int], special: SpecialIds, max_length: int
) -> tuple[list[int], list[int]]:
    """``[CLS] first [SEP] second [SEP]`` truncated to ``max_length``; returns (ids, token_type_ids).

    ``first`` is never truncated (it holds the query and its masks, or a title); ``second`` is cut to fit.
    """
    room = max_length - len(first) - 3
    if room < 0:
        raise ValueError(f"first segment of {len(first)} wordpieces does not fit in max_length={max_length}")
    ids = [special.cls, *first, special.sep, *list(second)[:room], special.sep]
    types = [0] * (len(first) + 2) + [1] * (len(ids) - len(first) - 2)
    return ids, types


def pack_single(tokens: Sequence[int], special: SpecialIds, max_length: int) -> list[int]:
    """``[CLS] tokens [SEP]`` truncated to ``max_length``."""
    return [special.cls, *list(tokens)[: max_length - 2], special.sep]


def reader_length(queries: "Ragged", max_block_length: int) -> int:
    """Room for ``[CLS] query [SEP] body [SEP]``: the longest query plus a whole block body (a block's
    ``[CLS] title [SEP] body [SEP]`` holds at most ``max_block_length - 3`` body wordpieces), so no body is cut."""
    return int(queries.lengths().max(initial=0)) + max_block_length


def pad(sequences: Sequence[Sequence[int]], pad_id: int, length: int | None = None) -> tuple[Tensor, Tensor]:
    """Right-pads to the longest sequence (or ``length``); returns ([N, L] ids, [N, L] attention mask)."""
    width = length if length is not None else max((len(s) for s in sequences), default=0)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        n = min(len(seq), width)
        ids[row, :n] = torch.as_tensor(list(seq)[:n], dtype=torch.long)
        mask[row, :n] = 1
    return ids, mask


@dataclass(frozen=True, slots=True)
class Ragged:
    """Sequences of wordpieces as one flat array and offsets (Arrow's list layout): sequence ``i`` is
    ``values[offsets[i]:offsets[i + 1]]``. Batches are packed from it with array operations, with no Python list of
    wordpieces in between: the index builder's loader thread packs about 63,000 BERT-base blocks a second this way on
    a 2-core EPYC (``benchmarks/builder.py``), against 5,260 from lists, too few to keep an H200 busy (6,800 a second
    in a bare forward)."""

    values: np.ndarray
    """[T] wordpiece ids, every sequence's one after another."""
    offsets: np.ndarray
    """[N + 1] int64; absolute positions in ``values``, so a slice of offsets is a slice of sequences."""

    @staticmethod
    def _offsets(lengths: np.ndarray) -> np.ndarray:
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return offsets

    @classmethod
    def of(cls, sequences: Sequence[Sequence[int]]) -> "Ragged":
        offsets = cls._offsets(np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences)))
        values = np.fromiter(itertools.chain.from_iterable(sequences), dtype=np.int64, count=int(offsets[-1]))
        return cls(values, offsets)

    @classmethod
    def from_arrow(cls, column: pa.Array | pa.ChunkedArray) -> "Ragged":
        """A list column (one gather of a block dataset in Arrow format); a null list is an empty sequence."""
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        lengths = pc.list_value_length(column).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        # note: list_flatten honours the array's own offset and skips nulls, so values line up with the offsets
        return cls(pc.list_flatten(column).to_numpy(zero_copy_only=False), cls._offsets(lengths))

    @classmethod
    def from_padded(cls, ids: np.ndarray, keep: np.ndarray) -> "Ragged":
        """Row ``i`` of [N, L] ``ids`` at its ``keep`` positions (a padded batch and its mask)."""
        return cls(ids[keep], cls._offsets(keep.sum(axis=1).astype(np.int64)))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def slice(self, start: int, end: int) -> "Ragged":
        """Sequences ``start:end``, sharing ``values``."""
        return Ragged(self.values, self.offsets[start : min(end, len(self)) + 1])

    def take(self, rows: np.ndarray | Sequence[int]) -> "Ragged":
        """Sequences ``rows``, in that order (a row may repeat), as a new compact ``Ragged``."""
        rows = np.asarray(rows, dtype=np.int64)
        lengths = self.lengths()[rows]
        return Ragged(self.values[_positions(self.offsets[rows], lengths)], self._offsets(lengths))

    def spread(self, present: np.ndarray) -> "Ragged":
        """These sequences at the ``True`` positions of ``present`` (as many as there are sequences) and empty
        sequences at the others, sharing ``values``: candidate slots whose block is missing read nothing."""
        if int(present.sum()) != len(self):
            raise ValueError(f"{int(present.sum())} places for {len(self)} sequences")
        lengths = np.zeros(len(present), dtype=np.int64)
        lengths[present] = self.lengths()
        return Ragged(self.values, self.offsets[0] + self._offsets(lengths))

    def to_lists(self) -> list[list[int]]:
        return [self.values[a:b].tolist() for a, b in zip(self.offsets[:-1].tolist(), self.offsets[1:].tolist())]


def _positions(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The flat positions ``starts[i] + j`` for ``j < lengths[i]``, sequence after sequence."""
    within = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.repeat(starts, lengths) + within


def _scatter(ids: np.ndarray, sequences: Ragged, lengths: np.ndarray, start: np.ndarray | int) -> None:
    """Writes the first ``lengths[i]`` wordpieces of sequence ``i`` into ``ids[i, start[i]:]``."""
    if int(lengths.sum()) == 0:
        return
    row = np.repeat(np.arange(len(lengths)), lengths)
    column = _positions(np.broadcast_to(start, lengths.shape), lengths)
    ids[row, column] = sequences.values[_positions(sequences.offsets[:-1], lengths)]


def pack_ragged_pairs(
    firsts: Ragged, seconds: Ragged, special: SpecialIds, max_length: int, first_cap: int | None = None
) -> dict[str, Tensor]:
    """``pack_pair`` for every pair, right-padded to the longest, by array operations (``first`` cut to ``first_cap``
    wordpieces first when given). Equal to ``pack_pair`` pair by pair (``tests/unit/data/test_packing.py``).

    Returns:
        dict with ``input_ids``, ``attention_mask`` and ``token_type_ids``, each [N, L] int64.
    """
    first_len = firsts.lengths() if first_cap is None else np.minimum(firsts.lengths(), first_cap)
    room = max_length - first_len - 3
    if len(room) and room.min() < 0:
        longest = int(first_len[np.argmin(room)])
        raise ValueError(f"first segment of {longest} wordpieces does not fit in max_length={max_length}")
    second_len = np.minimum(seconds.lengths(), room)
    total = first_len + second_len + 3
    rows, width = np.arange(len(total)), int(total.max(initial=0))
    ids = np.full((len(total), width), special.pad, dtype=np.int64)
    if len(total) == 0:
        return {name: torch.from_numpy(ids.copy()) for name in ("input_ids", "attention_mask", "token_type_ids")}
    ids[rows, 0] = special.cls
    _scatter(ids, firsts, first_len, 1)
    ids[rows, first_len + 1] = special.sep
    _scatter(ids, seconds, second_len, first_len + 2)
    ids[rows, total - 1] = special.sep
    position = np.arange(width)
    mask = position < total[:, None]
    types = mask & (position >= (first_len + 2)[:, None])
    return {
        "input_ids": torch.from_numpy(ids),
        "attention_mask": torch.from_numpy(mask.astype(np.int64)),
        "token_type_ids": torch.from_numpy(types.astype(np.int64)),
    }


def pack_pairs(
    firsts: Sequence[Sequence[int]], seconds: Sequence[Sequence[int]], special: SpecialIds, max_length: int
) -> dict[str, Tensor]:
    """``[CLS] first [SEP] second [SEP]`` for each pair (see ``pack_pair``), right-padded to the longest.

    Returns:
        dict with ``input_ids``, ``attention_mask`` and ``token_type_ids``, each [N, L].
    """
    return pack_ragged_pairs(Ragged.of(firsts), Ragged.of(seconds), special, max_length)


def pack_blocks(titles: Ragged, bodies: Ragged, special: SpecialIds, max_length: int) -> dict[str, Tensor]:
    """Document-embedder inputs for blocks, from their flat wordpieces: dict with input_ids, attention_mask,
    token_type_ids, each [N, L]."""
    # note: a title never takes more than half the block, so an overlong title cannot make a block unpackable
    return pack_ragged_pairs(titles, bodies, special, max_length, first_cap=max_length // 2)


def block_batch(
    titles: Sequence[Sequence[int]], bodies: Sequence[Sequence[int]], special: SpecialIds, max_length: int
) -> dict[str, Tensor]:
    """Document-embedder inputs for blocks: dict with input_ids, attention_mask, token_type_ids, each [N, L]."""
    return pack_blocks(Ragged.of(titles), Ragged.of(bodies), special, max_length)


def contains_run(haystack: Sequence[Hashable], needle: Sequence[Hashable]) -> bool:
    """Whether ``needle`` occurs in ``haystack`` as one contiguous run (a list or a tuple each); an empty ``needle``
    never does."""
    n = len(needle)
    if n == 0:
        return False
    needle = tuple(needle)
    # note: .index scans for the first element in C; the pre-training step runs this for every candidate slot
    start = 0
    while True:
        try:
            start = haystack.index(needle[0], start)
        except ValueError:
            return False
        if tuple(haystack[start : start + n]) == needle:
            return True
        start += 1


def contains_runs(haystacks: Ragged, needles: Ragged) -> np.ndarray:
    """[N] bool: ``contains_run(haystacks[i], needles[i])`` for each ``i``, by array operations (every start of every
    haystack compared with its needle, one needle position at a time)."""
    found = np.zeros(len(haystacks), dtype=bool)
    needle_len = needles.lengths()
    starts = np.maximum(haystacks.lengths() - needle_len + 1, 0) * (needle_len > 0)
    pair = np.repeat(np.arange(len(haystacks)), starts)
    at = _positions(haystacks.offsets[:-1], starts)
    match = np.ones(len(at), dtype=bool)
    for j in range(int(needle_len.max(initial=0))):
        used = needle_len[pair] > j
        # note: a pair whose needle is shorter reads position 0 (any valid one) and is not compared
        wanted = needles.values[np.where(used, needles.offsets[pair] + j, 0)]
        match &= ~used | (haystacks.values[np.where(used, at + j, 0)] == wanted)
    found[pair[match]] = True
    return found


def _apply(value: Any, fn: Callable[[Tensor], Tensor]) -> Any:
    if isinstance(value, Tensor):
        return fn(value)
    if isinstance(value, Movable):
        return value.apply(fn)
    return value


class Movable:
    """``.to(device)`` and ``.pin_memory()`` for a dataclass of tensors (and of such dataclasses), so
    ``accelerate.utils.send_to_device`` and a ``DataLoader(pin_memory=True)`` can move it."""

    def apply(self, fn: Callable[[Tensor], Tensor]):
        """A copy with ``fn`` applied to every tensor field, nested ones included."""
        changes = {f.name: _apply(getattr(self, f.name), fn) for f in dataclasses.fields(self)}
        return dataclasses.replace(self, **changes)

    def to(self, device: Any, non_blocking: bool = False):
        return self.apply(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self):
        """A copy in page-locked host memory, which ``to(cuda, non_blocking=True)`` copies without blocking."""
        return self.apply(Tensor.pin_memory)
