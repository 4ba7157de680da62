"""The stages after the warm start, shared by every pipeline: REALM pre-training evaluated before and after, and QA
fine-tuning evaluated before and after."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from contextvars import ContextVar, Token
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from realm.core.atomic import write_text_atomic
from realm.core.logging import MetricsLogger
from realm.core.tracking import TrackingConfig, log_summary_run, resolve_run_name
from realm.finetune.train import FinetuneConfig, Finetuner
from realm.pretrain.config import PretrainConfig
from realm.pretrain.export import write_finished_model
from realm.pretrain.heldout_eval import HeldoutMetrics, evaluate_heldout
from realm.run.layout import METRICS_FILE, SUMMARY_FILE
from realm.trainer.pretrain_loop import Trainer
from realm.training.accelerator import build_accelerator

logger = logging.getLogger(__name__)


class StageBanners:
    """A pipeline's numbered stage lines, so that a log says where the run is and how long each stage is:
    ``[3/5] ICT warm start: 1,000 steps -> runs/demo/ict``. ``with StageBanners(5):`` numbers the ``announce_stage``
    lines of the stages run inside it."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.count = 0
        self._token: Token | None = None

    def __enter__(self) -> StageBanners:
        self._token = _BANNERS.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _BANNERS.reset(self._token)


# note: a context variable, not a parameter: the stage functions are called by both pipelines and by the benchmarks,
# whose calls (and tests' stubs of them) stay as they are; outside a pipeline a stage's line is not numbered
_BANNERS: ContextVar[StageBanners | None] = ContextVar("stage_banners", default=None)


def announce_stage(name: str, what: str | int | None, out: str | Path | None = None) -> None:
    """The next stage's line: ``what`` is its steps (an int), a phrase, or None when the stage is skipped."""
    banners = _BANNERS.get()
    number = ""
    if banners is not None:
        banners.count += 1
        number = f"[{banners.count}/{banners.total}] "
    length = "skipped" if what is None else f"{what:,} steps" if isinstance(what, int) else what
    logger.info("%s%s: %s%s", number, name, length, f" -> {out}" if out and what is not None else "")


def pipeline_tracking(tracking: TrackingConfig | None, out: str | Path) -> TrackingConfig:
    """A pipeline's ``--tracking.*`` (None: no tracker) as every one of its stages takes it: one run name
    (``tracking.run_name``, else the pipeline's run directory's), so that W&B groups the warm starts, pre-training,
    its builder, QA and the pipeline's summary run together although each stage writes to its own folder."""
    tracking = tracking or TrackingConfig()
    return dataclasses.replace(tracking, run_name=resolve_run_name(tracking, out))


def write_summary(out: Path, summary: dict[str, Any], tracking: TrackingConfig) -> None:
    """A pipeline's figures to ``OUT/summary.json`` and, with W&B, to a ``pipeline`` run in the stages' group."""
    write_text_atomic(out / SUMMARY_FILE, json.dumps(summary, indent=2))
    log_summary_run(tracking, out, summary)


def finish_summary(out: Path, summary: dict[str, Any], t_start: float, tracking: TrackingConfig,
                   tail: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """``summary``, the pipeline's wall seconds since ``t_start`` and ``tail``, written (``write_summary``) and
    returned: how every pipeline ends, after its last stage or the one it stops after."""
    summary = {**summary, "wall_seconds": time.perf_counter() - t_start, **(tail or {})}
    write_summary(out, summary, tracking)
    return summary


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
    builder = ", the index builder beside it" if cfg.refresh.spawn_builder else ""
    announce_stage("REALM pre-training", f"{cfg.train.max_steps:,} steps{builder}, held-out evaluation before and "
                   "after", cfg.train.run_dir)  # fmt: skip
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
    try:
        # note: inside, so that the trainer's child builder (started, held until run) stops if this fails
        start = evaluate()  # the trainer's starting model: the warm-started retriever and encoder
        seconds["eval_start_s"] = time.perf_counter() - t
        t = time.perf_counter()
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


def pretrain_figures(pretrained: Pretrained, *, start_accuracy: bool = False, recall: bool = False) -> dict[str, Any]:
    """A pipeline's summary figures of its pre-training: held-out span accuracy with retrieval and closed book (also
    of the starting model with ``start_accuracy``), token accuracy, gold recall before and after (with ``recall``,
    where the held-out sentences know their article), and the trainer's refreshes, wait and steps."""
    start, end, train = pretrained.start, pretrained.end, pretrained.train
    figures: dict[str, Any] = {}
    for name, key in (("retrieval", "span_accuracy"), ("closed_book", "closed_book_span_accuracy")):
        if start_accuracy:
            figures[f"heldout_accuracy_{name}_start"] = getattr(start, key)
        figures[f"heldout_accuracy_{name}"] = getattr(end, key)
    figures |= {"heldout_token_accuracy_retrieval": end.token_accuracy,
                "heldout_token_accuracy_closed_book": end.closed_book_token_accuracy}  # fmt: skip
    if recall:
        figures |= {"gold_recall_at_k_start": start.gold_recall_at_k, "gold_recall_at_k_end": end.gold_recall_at_k,
                    "gold_recall_at_1_start": start.gold_recall_at_1, "gold_recall_at_1_end": end.gold_recall_at_1}
    return figures | {
        "k": end.k,
        "num_heldout_examples": end.num_examples,
        "num_index_refreshes": train["num_index_refreshes"],
        "trainer_wait_fraction": train["trainer_wait_fraction"],
        "pretrain_steps": train["step"],
    }


def finetune_and_evaluate(cfg: FinetuneConfig) -> dict:
    """Fine-tunes for QA (``realm finetune``) and returns exact match and top-5 accuracy on the dev questions before
    and after, with the step count and the number of dev questions."""
    announce_stage("QA fine-tuning", cfg.train.max_steps, cfg.train.run_dir)
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
