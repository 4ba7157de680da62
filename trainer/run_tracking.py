"""What the pre-training run reports to its trackers besides metrics: the warm starts it reads, each retriever export,
and at the end its summary and its final checkpoint as the ``model`` artefact (``realm.training.lineage``; the index
versions it swaps in are recorded by ``realm.trainer.index_sync``). Every function is a no-op without W&B; each
takes the ``realm.trainer.pretrain_loop.Trainer`` (untyped here: that module imports this one)."""

from __future__ import annotations

from typing import Any

from realm.core.config import to_dict
from realm.core.tracking import init_trackers
from realm.pretrain.export import ENCODER_DIR, MODEL_DIR
from realm.run.layout import CHECKPOINT_PREFIX, RETRIEVER_PREFIX, checkpoints_dir, retriever_dir
from realm.run.publication import folder_name, read_manifest
from realm.training.lineage import (
    log_retriever_export,
    model_artifact,
    update_summary,
    warm_start_artifact,
    wandb_run,
)


def start_tracking(trainer: Any) -> None:
    """Starts the trackers with the run's config; the warm starts (``train.init_retriever``/``init_encoder``, when
    ``realm ict``/``realm warmup`` published them) become inputs of the W&B run."""
    cfg = trainer.cfg
    init_trackers(trainer.accelerator, cfg.tracking, trainer.run_dir, to_dict(cfg))
    for folder in (cfg.train.init_retriever, cfg.train.init_encoder):
        if folder:
            warm_start_artifact(trainer.accelerator, folder, used=True)


def track_export(trainer: Any) -> None:
    """The retriever export of the current step (just published), an output of the W&B run."""
    folder = retriever_dir(trainer.run_dir) / folder_name(RETRIEVER_PREFIX, trainer.step)
    log_retriever_export(trainer.accelerator, trainer.run_dir, trainer.step, folder)


def end_tracking(trainer: Any, completed: bool) -> None:
    """Before the trackers finish: the run's summary (what ``realm train`` prints, with ``RUN/model`` when written)
    into the W&B run's, and, when the run ``completed`` all its steps, its last checkpoint as the ``model`` artefact
    (what a QA run with ``init.run`` starts from and uses)."""
    if wandb_run(trainer.accelerator) is None:
        return
    summary = trainer.summary()
    if read_manifest(trainer.run_dir / MODEL_DIR / ENCODER_DIR) is not None:
        summary["model"] = str((trainer.run_dir / MODEL_DIR).resolve())
    update_summary(trainer.accelerator, summary)
    checkpoint = checkpoints_dir(trainer.run_dir) / folder_name(CHECKPOINT_PREFIX, trainer.step)
    if completed and trainer.step >= trainer.cfg.train.max_steps and read_manifest(checkpoint) is not None:
        model_artifact(trainer.accelerator, trainer.run_dir, checkpoint, used=False)
