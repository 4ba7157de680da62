"""kNN-LM's distributions as pure functions, in log space (Khandelwal et al. 2020, eq. 2-3; Xu et al. 2023, eq. 2).

Neighbour ``scores`` are "higher is closer": the negative squared L2 distance (the paper's default) or the inner
product, as ``realm.index.mips`` returns them. With temperature ``tau``,

    p_kNN(w) = sum_{i: v_i = w} exp(s_i / tau) / sum_i exp(s_i / tau)        (i over the k neighbours)
    p(w)     = (1 - lambda) p_LM(w) + lambda p_kNN(w)

Slots an approximate index could not fill carry score ``-inf`` and take no mass. A token with no neighbour has
``log p_kNN = -inf``, which the interpolation handles exactly (it adds ``log lambda + -inf``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def _check(scores: Tensor, values: Tensor, tau: float) -> None:
    if scores.shape != values.shape or scores.ndim != 2:
        raise ValueError(f"scores and values must both be [Q, K], got {tuple(scores.shape)} and {tuple(values.shape)}")
    if not tau > 0:
        raise ValueError(f"tau must be positive, got {tau}")


def knn_target_log_probs(scores: Tensor, values: Tensor, targets: Tensor, tau: float = 1.0) -> Tensor:
    """[Q] ``log p_kNN(targets)`` from the [Q, K] neighbour ``scores`` and their token ``values``."""
    _check(scores, values, tau)
    logits = scores.double() / tau
    matches = torch.where(values == targets[:, None], logits, torch.full_like(logits, -math.inf))
    return _normalised(torch.logsumexp(matches, 1), torch.logsumexp(logits, 1)).float()


def neighbour_log_weights(scores: Tensor, tau: float = 1.0) -> Tensor:
    """[Q, K] each neighbour's log share of p_kNN, ``log softmax(scores / tau)`` over the K slots: p_kNN(w) is the sum
    of the shares of the neighbours whose value is w. Unfilled slots get -inf, a query with none at all -inf too."""
    _check(scores, scores, tau)
    return _log_weights(scores, tau).float()


def _log_weights(scores: Tensor, tau: float) -> Tensor:
    """``neighbour_log_weights`` in float64."""
    logits = scores.double() / tau
    return _normalised(logits, torch.logsumexp(logits, 1, keepdim=True).expand_as(logits))


def _normalised(log_mass: Tensor, log_norm: Tensor) -> Tensor:
    """``log_mass - log_norm``, and -inf (no mass), not NaN, for a query with no neighbour at all (every slot
    unfilled, as an approximate index can leave it)."""
    return torch.where(torch.isneginf(log_norm), torch.full_like(log_mass, -math.inf), log_mass - log_norm)


def knn_log_probs(scores: Tensor, values: Tensor, vocab_size: int, tau: float = 1.0) -> Tensor:
    """[Q, V] the whole ``log p_kNN`` distribution (neighbours sharing a token summed in log space)."""
    _check(scores, values, tau)
    logits = scores.double() / tau
    out = torch.full((scores.shape[0], vocab_size), -math.inf, dtype=torch.float64, device=scores.device)
    index = values.long().clamp(0, vocab_size - 1)
    out = out.scatter_reduce(1, index, logits, reduce="amax", include_self=True)
    # note: logsumexp per token = max + log sum exp(x - max); the max per (row, token) makes it overflow-safe
    shifted = torch.exp(logits - out.gather(1, index)).nan_to_num(0.0)
    sums = torch.zeros_like(out).scatter_add(1, index, shifted)
    out = out + torch.log(sums)
    return _normalised(out, torch.logsumexp(logits, 1, keepdim=True).expand_as(out)).float()


def knn_neighbour_log_probs(scores: Tensor, values: Tensor, tau: float = 1.0) -> tuple[Tensor, Tensor]:
    """([Q, K] token ids, [Q, K] ``log p_kNN`` of each id): p_kNN sparsely, at the (at most K) tokens it gives mass.

    Each slot carries the whole probability of its token, so neighbours sharing a token repeat the same value and
    a scatter of them into a [Q, V] tensor is deterministic. Equal to ``knn_log_probs(...).gather(1, ids)``, at
    O(K log K) per query instead of O(V): the tokens are grouped by a sort, not by a vocabulary-wide buffer.
    """
    _check(scores, values, tau)
    weights = _log_weights(scores, tau)
    ids = values.long()
    sorted_ids, order = ids.sort(dim=1)
    sorted_weights = weights.gather(1, order)
    new_run = torch.ones_like(sorted_ids, dtype=torch.bool)
    new_run[:, 1:] = sorted_ids[:, 1:] != sorted_ids[:, :-1]
    run = new_run.long().cumsum(1) - 1  # [Q, K] which token group each sorted slot belongs to
    # note: the same overflow-safe per-group logsumexp as knn_log_probs, over K groups instead of V tokens
    run_max = torch.full_like(weights, -math.inf).scatter_reduce(1, run, sorted_weights, reduce="amax")
    shifted = torch.exp(sorted_weights - run_max.gather(1, run)).nan_to_num(0.0)
    run_log = run_max + torch.log(torch.zeros_like(weights).scatter_add(1, run, shifted))
    return ids, torch.empty_like(weights).scatter(1, order, run_log.gather(1, run)).float()


def interpolate(lm_log_probs: Tensor, knn_log_probs_: Tensor, lam: float) -> Tensor:
    """``log((1 - lam) p_LM + lam p_kNN)`` of two log-probabilities of the same shape; ``lam = 0`` gives
    ``lm_log_probs`` exactly and ``lam = 1`` gives ``knn_log_probs_`` exactly."""
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lambda must be in [0, 1], got {lam}")
    if lam == 0.0:
        return lm_log_probs.clone()
    if lam == 1.0:
        return knn_log_probs_.clone()
    return torch.logaddexp(lm_log_probs + math.log1p(-lam), knn_log_probs_ + math.log(lam))


def oracle_log_probs(lm_log_probs: Tensor, knn_log_probs_: Tensor) -> Tensor:
    """``log max(p_LM, p_kNN)``: the interpolation with the best lambda for each token, chosen knowing the token (the
    mixture is linear in lambda, so its best is lambda 0 or 1): an upper bound for any adaptive lambda, not a
    system."""
    return torch.maximum(lm_log_probs, knn_log_probs_)


def recall_at_k(approximate_ids: Tensor, exact_ids: Tensor, k: int) -> float:
    """Mean over queries of the share of the exact top ``k`` ids (best first, [Q, >=k]) that the approximate search's
    top ``k`` also holds; unfilled approximate slots (id -1) hold nothing."""
    if k <= 0 or min(approximate_ids.shape[1], exact_ids.shape[1]) < k:
        raise ValueError(f"recall@{k} needs at least {k} ids per query from both searches")
    exact = exact_ids[:, :k].contiguous()
    approx = approximate_ids[:, :k].sort(dim=1).values  # note: a sorted row answers membership by binary search
    at = torch.searchsorted(approx, exact).clamp(max=k - 1)
    found = (approx.gather(1, at) == exact) & (exact >= 0)
    return float(found.double().sum(1).div(k).mean())


def mask_to_k(logits: Tensor, k: int) -> Tensor:
    """Keeps the ``k`` largest of each row, the rest ``-inf`` (Xu et al.'s mask-to-k; all kept when k >= width)."""
    if k <= 0:
        raise ValueError(f"k must be positive, got {k}")
    if k >= logits.shape[-1]:
        return logits
    top = logits.topk(k, dim=-1)
    return torch.full_like(logits, -math.inf).scatter(-1, top.indices, top.values)


def perplexity(nll_sum: float, num_tokens: int) -> float:
    """exp(mean negative log-likelihood); inf for an infinite sum (a token given probability 0)."""
    if num_tokens <= 0:
        raise ValueError("perplexity of zero tokens")
    mean = nll_sum / num_tokens
    return math.exp(mean) if mean < 700 else math.inf
