"""Open-domain QA fine-tuning losses (ORQA/REALM), as pure functions of logits and masks.

Both losses are marginal log-likelihoods of "some correct item": ``logsumexp(all) - logsumexp(correct)``, for the
retriever over the retrieved blocks (correct = the block contains an answer) and for the reader over every candidate
span of the top blocks (correct = the span is an answer). A question with nothing correct contributes exactly 0 to
that term (and no gradient), as in ORQA; the batch loss is the mean over questions of the sum of the two terms.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

# note: a finite stand-in for -inf: logsumexp over an all-masked row stays finite, so its zeroed loss has a zero
# (not NaN) gradient.
_MASKED = -1e9


def marginal_log_loss(logits: Tensor, correct: Tensor, valid: Tensor | None = None) -> Tensor:
    """[B, N] logits, [B, N] bool correct (and valid) -> [B] ``logsumexp(valid) - logsumexp(correct & valid)``.

    Rows without a correct valid entry give 0.
    """
    logits = logits.float()
    valid = torch.ones_like(correct, dtype=torch.bool) if valid is None else valid.bool()
    correct = correct.bool() & valid
    everything = torch.logsumexp(logits.masked_fill(~valid, _MASKED), dim=-1)
    right = torch.logsumexp(logits.masked_fill(~correct, _MASKED), dim=-1)
    return torch.where(correct.any(dim=-1), everything - right, torch.zeros_like(everything))


@dataclass
class QALoss:
    loss: Tensor
    """Scalar: mean over questions of retriever + reader loss."""
    retriever_loss: Tensor
    """Scalar: mean over questions of the retriever term (0 for questions with no correct block)."""
    reader_loss: Tensor
    """Scalar: mean over questions of the reader term (0 for questions with no correct span)."""


def open_qa_loss(
    retriever_logits: Tensor,
    retriever_correct: Tensor,
    retriever_valid: Tensor,
    reader_logits: Tensor,
    span_correct: Tensor,
    span_valid: Tensor,
) -> QALoss:
    """ORQA/REALM fine-tuning loss.

    Args:
        retriever_logits: [B, R] relevance of the R retrieved blocks (the retriever beam).
        retriever_correct: [B, R] whether each block contains an answer.
        retriever_valid: [B, R] False where fewer than R blocks were retrieved.
        reader_logits: [B, K, L, W] span score + retriever logit of the block, for the top K blocks.
        span_correct: [B, K, L, W] whether each span is an answer.
        span_valid: [B, K, L, W] whether each span is a candidate.
    """
    bsz = reader_logits.shape[0]
    retriever = marginal_log_loss(retriever_logits, retriever_correct, retriever_valid)
    reader = marginal_log_loss(
        reader_logits.reshape(bsz, -1), span_correct.reshape(bsz, -1), span_valid.reshape(bsz, -1)
    )
    return QALoss(loss=(retriever + reader).mean(), retriever_loss=retriever.mean(), reader_loss=reader.mean())
