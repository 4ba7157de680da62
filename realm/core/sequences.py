"""Contiguous-run search over token sequences: DPR's "the answer is in the passage" on wordpiece ids (the
pre-training candidates' answer recall) and on normalised word tokens (QA retrieval accuracy) alike."""

from __future__ import annotations

from typing import Hashable, Sequence


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
