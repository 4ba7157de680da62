"""REALM's marginal likelihood, as pure functions with their shapes in the docstrings.

p(y|x) = sum_z p(y|z, x) p(z|x), marginalised separately for each masked token as both the TF original and the HF
port do. The mask is always explicit: the HF port's default of all ones divides the loss by padding.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor


def upcast(x: Tensor) -> Tensor:
    """At least float32 (bf16/fp16 logits from autocast); float64 stays float64 for exact tests."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def _check_shapes(retrieval_logits: Tensor, token_log_probs: Tensor, mask: Tensor) -> None:
    b, k = retrieval_logits.shape
    if token_log_probs.shape[:2] != (b, k) or token_log_probs.dim() != 3:
        raise ValueError(f"token_log_probs must be [B={b}, K={k}, M], got {tuple(token_log_probs.shape)}")
    if mask.shape != (b, token_log_probs.shape[2]):
        raise ValueError(f"mask must be [B, M] = {(b, token_log_probs.shape[2])}, got {tuple(mask.shape)}")


def marginal_token_log_probs(retrieval_logits: Tensor, token_log_probs: Tensor) -> Tensor:
    """log p(y_j | x) = logsumexp_z [log p(z|x) + log p(y_j | z, x)].

    Args:
        retrieval_logits: [B, K] relevance scores f(x, z) of the K slots (slot 0 is the null document).
        token_log_probs: [B, K, M] log p(y_j | z, x) of the M masked targets under each slot.

    Returns:
        [B, M] marginal log-likelihood of each masked token.
    """
    log_p_z = torch.log_softmax(upcast(retrieval_logits), dim=-1)
    return torch.logsumexp(log_p_z.unsqueeze(-1) + upcast(token_log_probs), dim=1)


def _masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    mask = mask.to(values.dtype)
    # note: clamp keeps an all-padding batch at 0 instead of NaN.
    return (values * mask).sum() / mask.sum().clamp_min(1.0)


def marginal_mlm_loss(retrieval_logits: Tensor, token_log_probs: Tensor, mask: Tensor) -> Tensor:
    """REALM loss: ``-sum_j m_j log p(y_j|x) / sum_j m_j``, each masked token marginalised over the K slots.

    Args:
        retrieval_logits: [B, K]; token_log_probs: [B, K, M]; mask: [B, M] with 1 for real masked targets.

    Returns:
        Scalar loss averaged over the real masked tokens of the batch.
    """
    _check_shapes(retrieval_logits, token_log_probs, mask)
    return -_masked_mean(marginal_token_log_probs(retrieval_logits, token_log_probs), mask)


def marginal_span_loss(retrieval_logits: Tensor, token_log_probs: Tensor, mask: Tensor) -> Tensor:
    """Variant: the whole masked span is one outcome, ``-log sum_z p(z|x) prod_j p(y_j|z,x)`` per example.

    Shapes as :func:`marginal_mlm_loss`; averaged over examples that have at least one masked token.
    """
    _check_shapes(retrieval_logits, token_log_probs, mask)
    log_p_z = torch.log_softmax(upcast(retrieval_logits), dim=-1)
    span_log_probs = (upcast(token_log_probs) * mask.unsqueeze(1).to(token_log_probs.dtype)).sum(-1)  # [B, K]
    per_example = -torch.logsumexp(log_p_z + span_log_probs, dim=-1)
    return _masked_mean(per_example, (mask.sum(-1) > 0))


def closed_book_loss(retrieval_logits: Tensor, token_log_probs: Tensor, mask: Tensor) -> Tensor:
    """Baseline: the encoder conditioned on the null document only (slot 0); retrieval is ignored."""
    _check_shapes(retrieval_logits, token_log_probs, mask)
    return -_masked_mean(upcast(token_log_probs[:, 0]), mask)


LOSSES: dict[str, Callable[[Tensor, Tensor, Tensor], Tensor]] = {
    "per_token": marginal_mlm_loss,
    "per_span": marginal_span_loss,
    "closed_book": closed_book_loss,
}


def get_loss(name: str) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
    if name not in LOSSES:
        raise ValueError(f"unknown loss {name!r}; choose one of {sorted(LOSSES)}")
    return LOSSES[name]


@torch.no_grad()
def retrieval_metrics(retrieval_logits: Tensor, token_log_probs: Tensor, mask: Tensor) -> dict[str, Tensor]:
    """Diagnostics REALM logs (shapes as :func:`marginal_mlm_loss`); tensors, so no host sync here.

    - ``retrieval_utility``: mean over masked tokens of log p(y_j|x) - log p(y_j|null, x); positive when
      retrieved documents help.
    - ``null_doc_prob``: mean p(z = null | x), the probability mass left on slot 0.
    """
    marginal = marginal_token_log_probs(retrieval_logits, token_log_probs)
    utility = _masked_mean(marginal - upcast(token_log_probs[:, 0]), mask)
    null_prob = torch.softmax(upcast(retrieval_logits), dim=-1)[:, 0].mean()
    return {"retrieval_utility": utility, "null_doc_prob": null_prob}


@torch.no_grad()
def answer_metrics(retrieval_logits: Tensor, answer_slots: Tensor) -> dict[str, Tensor]:
    """How well retrieval served the reader, from the [B, K] slots holding the masked answer (``answer_slots``).

    - ``answer_recall``: share of queries with the answer in some retrieved slot (the candidates' top-k accuracy,
      asked of what this step trains on rather than of a held-out set).
    - ``answer_posterior``: mean p(z|x) mass on those slots (what the reader's gradient is weighted by).
    """
    slots = answer_slots.to(retrieval_logits.device)
    posterior = (torch.softmax(upcast(retrieval_logits), dim=-1) * slots).sum(-1)
    return {"answer_recall": slots.any(-1).float().mean(), "answer_posterior": posterior.mean()}


@torch.no_grad()
def accuracy_metrics(predictions: Tensor, targets: Tensor, mask: Tensor) -> dict[str, Tensor]:
    """``mlm_accuracy`` over the masked wordpieces and ``span_accuracy`` over examples (every wordpiece right).

    Args:
        predictions, targets: [B, M] wordpiece ids; mask: [B, M] with 1 for real masked targets.
    """
    mask = mask.bool()
    hit = predictions == targets
    return {
        "mlm_accuracy": (hit & mask).sum() / mask.sum().clamp_min(1),
        "span_accuracy": (hit | ~mask).all(dim=1).float().mean(),
    }
