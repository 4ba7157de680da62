"""The stages after the warm start, shared by every pipeline: REALM pre-training evaluated before and after, and QA
fine-tuning evaluated before and after."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from realm.core.logging import MetricsLogger
from realm.finetune.train import FinetuneConfig, Finetuner
from realm.pretrain.config import PretrainConfig
from realm.pretrain.export import write_finished_model
from realm.pretrain.heldout_eval import HeldoutMetrics, evaluate_heldout
from realm.run.layout import METRICS_FILE
from realm.trainer.pretrain_loop import Trainer
from realm.training.accelerator import build_accelerator


@dataclass(frozen=True, slots=True)
class Pretrained:
    """A finished pre-training run: held-out figures of its starting and final model, and the trainer's summary."""

    start: HeldoutMetrics
    end: HeldoutMetrics
    train: dict
    seconds: dict[str, float]


def pretrain_and_evaluate(cfg: PretrainConfig) -> Pretrained:
    """Runs REALM pre-training (the index builder as a child process when ``refresh.spawn_builder``) and evaluates
    the held-out sentences (``data.heldout``) with the starting and the final model.

    These two evaluations search every block exactly with the model's own document tower, on up to
    ``eval.max_examples`` sentences; they go into the run's metrics as ``eval_exact/*`` at step 0 and at the last
    step, apart from the trainer's curve (``eval/*``, on the live index and ``eval.interval_examples`` sentences).
    """
    # note: the config's trackers (a pipeline's --tracking.* reach it) and precision
    trainer = Trainer(cfg, build_accelerator(cfg.tracking, cfg.train.run_dir, cfg.train.precision))

    def evaluate() -> HeldoutMetrics:
        with trainer.accelerator.autocast():
            return evaluate_heldout(
                trainer.unwrapped, trainer.heldout, trainer.store, trainer.special, cfg.retriever,
                batch_size=cfg.eval.batch_size, max_examples=cfg.eval.max_examples, gold_titles=trainer.heldout_titles,
            )  # fmt: skip

    seconds = {}
    t = time.perf_counter()
    start = evaluate()  # the trainer's starting model: the warm-started retriever and encoder
    seconds["eval_start_s"] = time.perf_counter() - t
    t = time.perf_counter()
    try:
        train = trainer.run()
        train |= write_finished_model(trainer.run_dir, trainer.unwrapped, trainer.tokenizer, cfg, trainer.step,
                                      trainer.accelerator.is_main_process)  # fmt: skip
    finally:
        trainer.close()
    seconds["pretrain_s"] = time.perf_counter() - t
    t = time.perf_counter()
    end = evaluate()
    seconds["eval_end_s"] = time.perf_counter() - t
    metrics = MetricsLogger(Path(cfg.train.run_dir) / METRICS_FILE)
    metrics.log(start.as_dict("eval_exact/"), 0)
    metrics.log(end.as_dict("eval_exact/"), train["step"])
    metrics.close()
    return Pretrained(start, end, train, seconds)


def finetune_and_evaluate(cfg: FinetuneConfig) -> dict:
    """Fine-tunes for QA (``realm finetune``) and returns exact match and top-5 accuracy on the dev questions before
    and after, with the step count and the number of dev questions."""
    tuner = Finetuner(cfg)
    tuner.train()
    evals = tuner.evaluations
    start, end = evals[0][1], evals[-1][1]
    return {
        "qa_exact_match_start": start["exact_match"],
        "qa_exact_match_end": end["exact_match"],
        "qa_top5_accuracy_start": start["top5_accuracy"],
        "qa_top5_accuracy_end": end["top5_accuracy"],
        "qa_steps": evals[-1][0],
        "qa_num_questions": end["num_questions"],
    }
