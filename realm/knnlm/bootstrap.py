"""Paired bootstrap over evaluation tokens: how sure is a perplexity difference between two systems on the same text?

Both systems score the same T tokens; ``d_t = nll_b(t) - nll_a(t)`` is their per-token difference. The relative
perplexity change is ``ppl_b / ppl_a - 1 = exp(mean(d)) - 1``, a function of the mean difference alone, so one
resampling serves it: each of ``num_resamples`` resamples draws T token indices with replacement (the same indices
for both systems: the pairing), and the interval is the percentile interval of ``mean(d)`` mapped through
``exp(.) - 1`` (monotone, so the percentiles of the mapped values are the mapped percentiles).

Tokens of one document are not independent, so a token-level interval is narrower than the truth when the
difference varies by document; ``unit="document"`` resamples whole documents instead (a cluster bootstrap: the mean
is then the resampled documents' summed differences over their summed tokens). Identical systems give exactly
[0, 0]; a constant per-token shift ``c`` gives exactly ``exp(c) - 1`` at both ends.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from torch import Tensor

from realm.core.checks import Problems
from realm.knnlm.knn import perplexity

UNITS = ("token", "document")
# note: resamples drawn per chunk, so the [chunk, units] index matrix stays small (~64 MB at 1M units)
_CHUNK_CELLS = 8_000_000


@dataclass(kw_only=True, slots=True)
class BootstrapConfig:
    """How the confidence interval of a paired difference is resampled."""

    num_resamples: int = 1000
    """Resamples drawn (the interval's ends are percentiles of these; more resamples, less Monte Carlo noise)."""
    confidence: float = 0.95
    """Coverage of the percentile interval (0.95: the 2.5th and 97.5th percentiles)."""
    seed: int = 0
    """Seed of the resampling (the same seed and inputs give the same interval)."""
    unit: str = "token"
    """What is resampled: ``token`` (every evaluation token independently) or ``document`` (whole documents)."""

    def __post_init__(self) -> None:
        problems = Problems()
        if self.num_resamples < 1:
            problems.add(f"num_resamples must be >= 1, got {self.num_resamples}")
        if not 0.0 < self.confidence < 1.0:
            problems.add(f"confidence must be in (0, 1), got {self.confidence}")
        if self.unit not in UNITS:
            problems.add(f"unit must be one of {', '.join(UNITS)}, got {self.unit!r}")
        problems.raise_if_any()


@dataclass(frozen=True, slots=True)
class PairedDifference:
    """Perplexities of systems a and b on the same tokens and b's relative change against a, with its interval."""

    num_tokens: int
    ppl_a: float
    ppl_b: float
    relative_change: float
    """``ppl_b / ppl_a - 1``: negative when b is better (lower perplexity)."""
    ci_low: float
    ci_high: float
    confidence: float
    num_resamples: int
    seed: int
    unit: str
    num_units: int
    """Tokens, or documents with ``unit="document"``: what was resampled."""

    @property
    def excludes_zero(self) -> bool:
        """The interval does not contain 0: the difference is significant at this confidence."""
        return self.ci_high < 0.0 or self.ci_low > 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "excludes_zero": self.excludes_zero}


def _as_float64(values: np.ndarray | Tensor, name: str) -> np.ndarray:
    if isinstance(values, Tensor):
        values = values.detach().cpu().double().numpy()
    out = np.asarray(values, dtype=np.float64)
    if out.ndim != 1:
        raise ValueError(f"{name} must be one log-probability per token ([T]), got shape {out.shape}")
    return out


def _group_sums(diff: np.ndarray, groups: np.ndarray | Tensor | None) -> tuple[np.ndarray, np.ndarray]:
    """([G] summed differences, [G] tokens) per resampling unit (each token its own unit when ``groups`` is None)."""
    if groups is None:
        return diff, np.ones_like(diff)
    if isinstance(groups, Tensor):
        groups = groups.cpu().numpy()
    groups = np.asarray(groups)
    if groups.shape != diff.shape:
        raise ValueError(f"groups must give one document per token, got shape {groups.shape} for {diff.shape}")
    _, inverse = np.unique(groups, return_inverse=True)
    return np.bincount(inverse, weights=diff), np.bincount(inverse).astype(np.float64)


def resampled_means(sums: np.ndarray, counts: np.ndarray, num_resamples: int, seed: int) -> np.ndarray:
    """[R] ``sum(sums[idx]) / sum(counts[idx])`` for R resamples of ``len(sums)`` unit indices with replacement."""
    rng = np.random.default_rng(seed)
    units = len(sums)
    chunk = max(1, _CHUNK_CELLS // units)
    means = []
    for first in range(0, num_resamples, chunk):
        idx = rng.integers(0, units, size=(min(chunk, num_resamples - first), units))
        means.append(sums[idx].sum(1) / counts[idx].sum(1))
    return np.concatenate(means)


def paired_bootstrap(
    log_probs_a: np.ndarray | Tensor,
    log_probs_b: np.ndarray | Tensor,
    cfg: BootstrapConfig,
    groups: np.ndarray | Tensor | None = None,
) -> PairedDifference:
    """The relative perplexity change of b against a on the same tokens and its paired-bootstrap interval.

    Args:
        log_probs_a: [T] natural-log probabilities system a gave the evaluation tokens (e.g. the LM alone).
        log_probs_b: [T] the same tokens' log-probabilities under system b (e.g. the kNN-LM), in the same order.
        cfg: Resamples, confidence, seed and unit.
        groups: [T] the document of each token; needed (only) with ``cfg.unit == "document"``.

    Raises:
        ValueError: Shapes differ, no token, a token of probability 0 (its perplexity is infinite, so no interval),
            or a document bootstrap without ``groups``.
    """
    a, b = _as_float64(log_probs_a, "log_probs_a"), _as_float64(log_probs_b, "log_probs_b")
    if a.shape != b.shape:
        raise ValueError(f"the two systems must score the same tokens, got {a.shape[0]} and {b.shape[0]}")
    if a.size == 0:
        raise ValueError("paired bootstrap of zero tokens")
    for name, values in (("a", a), ("b", b)):
        bad = ~np.isfinite(values)
        if bad.any():
            raise ValueError(
                f"system {name} gives {int(bad.sum())} of {values.size} tokens a non-finite log-probability (e.g. "
                f"token {int(np.argmax(bad))}); its perplexity has no interval"
            )
    if cfg.unit == "document" and groups is None:
        raise ValueError("a document bootstrap needs groups (the document of each token)")
    diff = a - b  # note: nll_b - nll_a = -(log p_b) - -(log p_a)
    sums, counts = _group_sums(diff, groups if cfg.unit == "document" else None)
    means = resampled_means(sums, counts, cfg.num_resamples, cfg.seed)
    tail = (1.0 - cfg.confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return PairedDifference(
        num_tokens=int(a.size),
        ppl_a=perplexity(-float(a.sum()), a.size),
        ppl_b=perplexity(-float(b.sum()), b.size),
        relative_change=math.expm1(float(diff.mean())),
        ci_low=math.expm1(float(low)),
        ci_high=math.expm1(float(high)),
        confidence=cfg.confidence,
        num_resamples=cfg.num_resamples,
        seed=cfg.seed,
        unit=cfg.unit,
        num_units=len(sums),
    )
