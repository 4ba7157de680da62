"""The pre-training configuration: a root that only composes each component's own config."""

from __future__ import annotations

from dataclasses import dataclass, field

from realm.marginal import LOSSES
from realm.model import ModelConfig
from realm.retriever import RetrieverConfig
from realm.tracking import TrackingConfig
from trainer.data import DataConfig
from trainer.optim import OptimConfig
from trainer.refresh import RefreshConfig


@dataclass(kw_only=True, slots=True)
class TrainConfig:
    """The loop: length, batch, periodic actions, resume."""

    run_dir: str = "runs/realm"
    """The run directory shared with the index builder (DESIGN.md section 2)."""
    max_steps: int = 200_000
    batch_size: int = 32
    """Queries per process per micro-batch; the global batch is ``batch_size x processes x grad_accum_steps`` (the
    paper's is 512). The number of processes comes from the launcher (``launch/accelerate/*.yaml``)."""
    grad_accum_steps: int = 1
    """Micro-batches per process per optimizer step (gradients are accumulated without synchronising until the last)."""
    seed: int = 0
    loss: str = "per_token"
    """Marginalisation: ``per_token`` (REALM), ``per_span``, or ``closed_book`` (ablation: no retrieval)."""
    log_interval: int = 10
    save_interval: int = 1000
    keep_checkpoints: int = 2
    eval_interval: int = 0
    """Steps between held-out evaluations on the live index (0: only at the end)."""
    stop_at_step: int = 0
    """End this invocation at this step with a checkpoint, as a pre-empted job would (0: run to max_steps); the
    learning-rate schedule still targets ``max_steps``, so a resumed run continues exactly."""
    resume: str = "auto"
    """``auto``: newest complete checkpoint in run_dir if any; ``never``; or a checkpoint folder."""
    init_retriever: str = ""
    """Warm start of both embedders (e.g. the ``retriever`` folder written by ``realm ict``); weights only."""
    init_encoder: str = ""
    """Warm start of the knowledge-augmented encoder from a ``BertForMaskedLM`` folder or name; weights only."""
    num_threads: int = 0
    """Intra-op threads of the trainer (0: torch's default)."""

    def __post_init__(self) -> None:
        if self.max_steps <= 0 or self.batch_size <= 0 or self.grad_accum_steps <= 0:
            raise ValueError("max_steps, batch_size and grad_accum_steps must be positive")
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {sorted(LOSSES)}, got {self.loss!r}")
        if min(self.log_interval, self.save_interval, self.keep_checkpoints) <= 0 or self.eval_interval < 0:
            raise ValueError("log_interval, save_interval and keep_checkpoints must be positive")
        if self.stop_at_step < 0:
            raise ValueError(f"stop_at_step must be >= 0, got {self.stop_at_step}")
        explicit_resume = self.resume not in ("auto", "never")
        if explicit_resume and (self.init_retriever or self.init_encoder):
            raise ValueError("resume from a checkpoint and init_* warm starts cannot both be set")


@dataclass(kw_only=True, slots=True)
class EvalConfig:
    """Held-out masked-fact evaluation."""

    max_examples: int = 1000
    """Evaluate on at most this many held-out sentences (the first ones in the file)."""
    batch_size: int = 32


@dataclass(kw_only=True, slots=True)
class PretrainConfig:
    train: TrainConfig = field(default_factory=TrainConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    retriever: RetrieverConfig = field(default_factory=RetrieverConfig)
    refresh: RefreshConfig = field(default_factory=RefreshConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
