"""Is the evaluation text in the datastore? Exact token n-gram overlap, checked before any perplexity is reported.

A kNN-LM whose datastore holds the evaluation text copies it: the nearest key of each evaluation token is the same
context in the datastore, with the right token as its value. The check needs no text beside the datastore: its
values are the corpus's tokens in order (``realm.knnlm.datastore.values_of``), so every ``n``-token sequence of the
datastore can be hashed and looked up. An evaluation token is *covered* when it lies in an ``n``-gram of its
document (its tokens after BOS) that also occurs in the reference; the overlap is the covered share of the
evaluation tokens.

Soundness: equal sequences have equal hashes, so no overlap is missed; every hash match is then compared token by
token, so none is invented by a collision. The reference's documents are concatenated, so an ``n``-gram that spans
two of its documents is also looked up (a sequence an evaluation document would have to contain verbatim). Tokens
of documents shorter than ``n`` are not checked and are counted as such. Cost: the reference's hashes and their sort
order, 16 bytes per token, and ``n`` vectorised passes over each text.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from realm.core.checks import Problems
from realm.core.errors import ConfigError

logger = logging.getLogger(__name__)

ACTIONS = ("refuse", "report")
_BASE = np.uint64(0x9E3779B97F4A7C15)  # note: odd, so the polynomial hash mod 2^64 keeps every token's bits


@dataclass(kw_only=True, slots=True)
class OverlapConfig:
    """When an evaluation text counts as leaked into the datastore (or into the other evaluation split)."""

    ngram: int = 32
    """Tokens per compared sequence (32 of the tiny LM's WordPieces are ~25 words: shared names and stock phrases
    are shorter; a copied sentence is not)."""
    max_fraction: float = 0.0
    """Largest share of evaluation tokens that may be covered by a sequence found in the reference."""
    action: str = "refuse"
    """``refuse`` (stop with an error naming the overlap) or ``report`` (log it and record it in the results)."""

    def __post_init__(self) -> None:
        problems = Problems()
        if self.ngram < 2:
            problems.add(f"ngram must be >= 2, got {self.ngram}")
        if not 0.0 <= self.max_fraction <= 1.0:
            problems.add(f"max_fraction must be in [0, 1], got {self.max_fraction}")
        if self.action not in ACTIONS:
            problems.add(f"action must be one of {', '.join(ACTIONS)}, got {self.action!r}")
        problems.raise_if_any()


@dataclass(frozen=True, slots=True)
class Overlap:
    """How much of an evaluation set lies in ``n``-grams of a reference text, and the first such place."""

    split: str
    """The evaluation set checked, e.g. ``test``."""
    reference: str
    """The text it was looked up in, e.g. ``datastore``."""
    ngram: int
    num_tokens: int
    """Evaluation tokens (all of them, checked or not)."""
    num_unchecked: int
    """Tokens of documents shorter than ``ngram`` (no sequence to look up)."""
    num_covered: int
    num_documents_hit: int
    example_document: int
    """Index of the first document with an overlap (-1: none)."""
    example_position: int
    """Position (after BOS) of its first covered token (-1: none)."""
    example_tokens: tuple[int, ...]
    """The first overlapping sequence ((): none)."""

    @property
    def what(self) -> str:
        return f"{self.split} vs {self.reference}"

    @property
    def fraction(self) -> float:
        return self.num_covered / self.num_tokens if self.num_tokens else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["example_tokens"] = list(self.example_tokens)
        return {"what": self.what, **out, "fraction": self.fraction}


def ngram_hashes(tokens: np.ndarray, n: int) -> np.ndarray:
    """[len - n + 1] uint64 polynomial hash of every ``n``-token window (empty when shorter than ``n``)."""
    t = np.asarray(tokens).astype(np.uint64) + np.uint64(1)
    count = len(t) - n + 1
    h = np.zeros(max(count, 0), dtype=np.uint64)
    if count <= 0:
        return h
    with np.errstate(over="ignore"):  # note: wraps mod 2^64 on purpose
        for j in range(n):
            h = h * _BASE + t[j : j + count]
    return h


class NgramIndex:
    """Every ``n``-gram of a reference token stream, for exact lookups."""

    def __init__(self, tokens: np.ndarray, n: int, name: str = "reference") -> None:
        self.tokens, self.n, self.name = np.asarray(tokens, dtype=np.int64), n, name
        hashes = ngram_hashes(self.tokens, n)
        self.order = np.argsort(hashes, kind="stable")
        self.sorted = hashes[self.order]

    def matches(self, doc: np.ndarray) -> np.ndarray:
        """[len(doc) - n + 1] bool: the ``n``-gram starting there occurs in the reference (checked token by token)."""
        doc = np.asarray(doc, dtype=np.int64)
        hashes = ngram_hashes(doc, self.n)
        found = np.zeros(len(hashes), dtype=bool)
        if len(hashes) == 0 or len(self.sorted) == 0:
            return found
        pos = np.minimum(np.searchsorted(self.sorted, hashes), len(self.sorted) - 1)
        starts = np.nonzero(self.sorted[pos] == hashes)[0]
        ref_starts = self.order[pos[starts]]
        same = np.ones(len(starts), dtype=bool)
        for j in range(self.n):
            same &= self.tokens[ref_starts + j] == doc[starts + j]
        found[starts[same]] = True
        return found


def measure_overlap(docs: Sequence[np.ndarray], reference: NgramIndex, split: str) -> Overlap:
    """The overlap of ``docs`` (``tokenize_documents``' ``[BOS] tokens``; BOS is not compared) with ``reference``."""
    n = reference.n
    total = unchecked = covered = hit = 0
    example: tuple[int, int, tuple[int, ...]] = (-1, -1, ())
    for index, doc in enumerate(docs):
        body = np.asarray(doc)[1:]
        total += len(body)
        if len(body) < n:
            unchecked += len(body)
            continue
        starts = np.nonzero(reference.matches(body))[0]
        if len(starts) == 0:
            continue
        marks = np.zeros(len(body) + 1, dtype=np.int64)
        np.add.at(marks, starts, 1)
        np.add.at(marks, starts + n, -1)
        covered += int((np.cumsum(marks)[:-1] > 0).sum())
        hit += 1
        if example[0] < 0:
            first = int(starts[0])
            example = (index, first, tuple(int(t) for t in body[first : first + n]))
    return Overlap(split=split, reference=reference.name, ngram=n, num_tokens=total, num_unchecked=unchecked,
                   num_covered=covered, num_documents_hit=hit, example_document=example[0],
                   example_position=example[1], example_tokens=example[2])  # fmt: skip


def enforce(overlap: Overlap, cfg: OverlapConfig, decode: Callable[[list[int]], str] | None = None) -> bool:
    """Refuses (``ConfigError``) or logs an overlap above ``cfg.max_fraction``; returns whether it is above."""
    if overlap.fraction <= cfg.max_fraction:
        return False
    sample = decode(list(overlap.example_tokens)) if decode is not None else str(list(overlap.example_tokens))
    message = (
        f"{overlap.what}: {overlap.num_covered} of {overlap.num_tokens} evaluation tokens ({overlap.fraction:.2%}, "
        f"in {overlap.num_documents_hit} documents) lie in {overlap.ngram}-token sequences that also occur in the "
        f"{overlap.reference} (max_fraction {cfg.max_fraction}); e.g. document {overlap.example_document} at token "
        f"{overlap.example_position}: {sample[:200]!r}"
    )
    if cfg.action == "refuse":
        raise ConfigError(f"{message}; remove that text from one side, or pass --overlap.action=report to measure "
                          "anyway (the overlap is then recorded with the results)")  # fmt: skip
    logger.warning("%s (reported, not refused: overlap.action=report)", message)
    return True
