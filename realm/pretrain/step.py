"""One training step as a function of (model, batch): loss and metrics, no logging, saving or index I/O.

Every metric is a mean over some unit (masked tokens, examples, examples with a masked token), and the step says how
many units each mean covers (``StepOutput.counts``). The loop sums ``metric x count`` and the counts over micro-batches,
steps and processes before dividing, so a logged value is the mean over everything the window saw, whatever the
split of a global batch into processes and micro-batches (and however many examples the masking rejected on each).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

import torch
from torch import Tensor

from realm.pretrain.batch import RealmBatch
from realm.pretrain.loss import accuracy_metrics, answer_metrics, retrieval_metrics
from realm.pretrain.model import RealmModel, RealmOutput

LossFn = Callable[[Tensor, Tensor, Tensor], Tensor]
Unit = Literal["token", "example", "masked_example"]

LOSS_UNITS: dict[str, Unit] = {"per_token": "token", "per_span": "masked_example", "closed_book": "token"}
"""What each loss of ``realm.pretrain.loss.LOSSES`` averages over (per_span: examples with at least one masked token)."""
METRIC_UNITS: dict[str, Unit] = {
    "retrieval_utility": "token",
    "null_doc_prob": "example",
    "answer_recall": "example",
    "answer_posterior": "example",
    "mlm_accuracy": "token",
    "span_accuracy": "example",
    "closed_book_mlm_accuracy": "token",
    "closed_book_span_accuracy": "example",
}


@dataclass
class StepOutput:
    loss: Tensor
    metrics: dict[str, Tensor]
    """Detached scalar tensors (means over this batch); the loop calls ``.item()`` only when it logs."""
    counts: dict[str, Tensor]
    """For each metric, how many units its mean is taken over (the weight of this batch in a larger mean)."""
    output: RealmOutput | None = None
    """The model's output, for the loop's retrieval tables."""


def batch_counts(batch: RealmBatch) -> dict[Unit, Tensor]:
    """Units in a batch, known before the forward pass: masked tokens, examples, examples with a masked token."""
    mask = batch.target_mask.bool()
    return {
        "token": mask.sum(),
        "example": torch.tensor(mask.shape[0], device=mask.device),
        "masked_example": mask.any(dim=1).sum(),
    }


def prediction_metrics(output: RealmOutput, batch: RealmBatch) -> dict[str, Tensor]:
    """Masked-token and whole-span accuracy of the marginal prediction and of the closed-book (null) one."""
    closed_book = accuracy_metrics(output.closed_book_predictions, batch.target_ids, batch.target_mask)
    return {
        **accuracy_metrics(output.predictions, batch.target_ids, batch.target_mask),
        **{f"closed_book_{name}": value for name, value in closed_book.items()},
    }


def train_step(model: RealmModel, batch: RealmBatch, loss_fn: LossFn, loss_unit: Unit = "token") -> StepOutput:
    """Forward pass and loss; the caller owns backward, clipping and the optimizer.

    ``loss_unit`` is what ``loss_fn`` averages over (``LOSS_UNITS[name]``), the weight of ``loss`` in ``counts``.
    """
    output: RealmOutput = model(batch)
    loss = loss_fn(output.retrieval_logits, output.token_log_probs, batch.target_mask)
    metrics = {
        "loss": loss.detach(),
        **retrieval_metrics(output.retrieval_logits, output.token_log_probs, batch.target_mask),
        **prediction_metrics(output, batch),
    }
    if batch.candidates.answer_slots is not None:  # note: None only for candidates built by hand
        metrics |= answer_metrics(output.retrieval_logits.detach(), batch.candidates.answer_slots)
    units = batch_counts(batch)
    counts = {name: units[loss_unit if name == "loss" else METRIC_UNITS[name]] for name in metrics}
    return StepOutput(loss=loss, metrics=metrics, counts=counts, output=output)
