"""One training step as a function of (model, batch): loss and metrics, no logging, saving or index I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from torch import Tensor

from realm.batch import RealmBatch
from realm.marginal import retrieval_metrics
from realm.model import RealmModel, RealmOutput

LossFn = Callable[[Tensor, Tensor, Tensor], Tensor]


@dataclass
class StepOutput:
    loss: Tensor
    metrics: dict[str, Tensor]
    """Detached scalar tensors; the loop calls ``.item()`` only when it logs."""
    output: RealmOutput | None = None
    """The model's output, for the loop's retrieval tables."""


def prediction_metrics(output: RealmOutput, batch: RealmBatch) -> dict[str, Tensor]:
    """Masked-token and whole-span accuracy of the marginal prediction and of the closed-book (null) one."""
    mask = batch.target_mask.bool()
    metrics = {}
    for name, pred in (("", output.predictions), ("closed_book_", output.closed_book_predictions)):
        correct = (pred == batch.target_ids) | ~mask
        metrics[f"{name}mlm_accuracy"] = ((pred == batch.target_ids) & mask).sum() / mask.sum().clamp_min(1)
        metrics[f"{name}span_accuracy"] = correct.all(dim=1).float().mean()
    return metrics


def train_step(model: RealmModel, batch: RealmBatch, loss_fn: LossFn) -> StepOutput:
    """Forward pass and loss; the caller owns backward, clipping and the optimizer."""
    output: RealmOutput = model(batch)
    loss = loss_fn(output.retrieval_logits, output.token_log_probs, batch.target_mask)
    metrics = {
        "loss": loss.detach(),
        **retrieval_metrics(output.retrieval_logits, output.token_log_probs, batch.target_mask),
        **prediction_metrics(output, batch),
    }
    return StepOutput(loss=loss, metrics=metrics, output=output)
