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
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Sequence

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


def reader_length(queries: Sequence[Sequence[int]], max_block_length: int) -> int:
    """Room for ``[CLS] query [SEP] body [SEP]``: the longest query plus a whole block body (a block's
    ``[CLS] title [SEP] body [SEP]`` holds at most ``max_block_length - 3`` body wordpieces), so no body is cut."""
    return max((len(q) for q in queries), default=0) + max_block_length


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


def pack_pairs(
    firsts: Sequence[Sequence[int]], seconds: Sequence[Sequence[int]], special: SpecialIds, max_length: int
) -> dict[str, Tensor]:
    """``[CLS] first [SEP] second [SEP]`` for each pair (see ``pack_pair``), right-padded to the longest.

    Returns:
        dict with ``input_ids``, ``attention_mask`` and ``token_type_ids``, each [N, L].
    """
    packed = [pack_pair(f, s, special, max_length) for f, s in zip(firsts, seconds)]
    ids, mask = pad([p[0] for p in packed], special.pad)
    types, _ = pad([p[1] for p in packed], 0, ids.shape[1])
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def block_batch(
    titles: Sequence[Sequence[int]], bodies: Sequence[Sequence[int]], special: SpecialIds, max_length: int
) -> dict[str, Tensor]:
    """Document-embedder inputs for blocks: dict with input_ids, attention_mask, token_type_ids, each [N, L]."""
    # note: a title never takes more than half the block, so an overlong title cannot make a block unpackable
    return pack_pairs([list(t)[: max_length // 2] for t in titles], bodies, special, max_length)


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
