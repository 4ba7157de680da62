"""The pre-training configuration: a root that only composes each component's own config."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from realm.core.checks import Problems
from realm.core.tracking import TrackingConfig
from realm.models.bert import ModelConfig
from realm.models.retriever import RetrieverConfig
from realm.pretrain.data import DataConfig
from realm.pretrain.loss import LOSSES
from realm.pretrain.refresh import RefreshConfig
from realm.training.optim import OptimConfig
from realm.training.scaffold import LoopConfig


@dataclass(kw_only=True, slots=True)
class TrainConfig(LoopConfig):
    """The pre-training loop: the scaffold's fields (``realm.training.scaffold``) and what only REALM has."""

    run_dir: str = "runs/realm"
    """The run directory shared with the index builder (DESIGN.md section 2)."""
    max_steps: int = 200_000
    batch_size: int = 32
    """Queries per process per micro-batch; the global batch is ``batch_size x processes x grad_accum_steps`` (the
    paper's is 512). The number of processes comes from the launcher (``launch/accelerate/*.yaml``)."""
    grad_accum_steps: int = 1
    """Micro-batches per process per optimizer step (gradients are accumulated without synchronising until the last)."""
    loss: str = "per_token"
    """Marginalisation: ``per_token`` (REALM), ``per_span``, or ``closed_book`` (ablation: no retrieval)."""
    log_interval: int = 10
    eval_interval: int = 0
    """Steps between held-out evaluations on the live index, from step 0 (0: none), logged as ``eval/*``: the
    learning curve of held-out span accuracy and gold recall (``eval.interval_examples`` keeps it cheap)."""
    prefetch_candidates: bool = False
    """Search and pack each micro-batch's candidates in a worker thread while the one before it trains (for GPUs,
    where the device otherwise idles through the search). The next step's first micro-batch is then searched with
    the query tower one optimizer step stale; its candidates are still scored by the live towers
    (``realm.trainer.candidate_prefetch``). Resume stays exact."""
    init_retriever: str = ""
    """Warm start of both embedders (e.g. the ``retriever`` folder written by ``realm ict``); weights only."""
    init_encoder: str = ""
    """Warm start of the knowledge-augmented encoder from a ``BertForMaskedLM`` folder or name; weights only."""

    MIN_STEPS: ClassVar[int] = 1  # a job that takes no step has nothing to publish

    def __post_init__(self) -> None:
        problems = Problems()
        if self.grad_accum_steps < 1:
            problems.add(f"grad_accum_steps must be >= 1, got {self.grad_accum_steps}")
        problems.check(LoopConfig.__post_init__, self)
        if self.loss not in LOSSES:
            problems.add(f"loss must be one of {sorted(LOSSES)}, got {self.loss!r}")
        if self.eval_interval < 0:
            problems.add(f"eval_interval must be >= 0, got {self.eval_interval}")
        explicit_resume = self.resume not in ("auto", "never")
        if explicit_resume and (self.init_retriever or self.init_encoder):
            problems.add("resume from a checkpoint and init_* warm starts cannot both be set")
        problems.raise_if_any()


EVAL_SEARCH_MODES = ("auto", "exact", "index")


@dataclass(kw_only=True, slots=True)
class EvalConfig:
    """Held-out masked-fact evaluation."""

    max_examples: int = 1000
    """Evaluate on at most this many held-out sentences (the first ones in the file)."""
    interval_examples: int = 0
    """The periodic evaluations (``train.eval_interval``) use the first this many held-out sentences, the same ones
    each time, so a learning curve costs little; 0: ``max_examples``."""
    batch_size: int = 32
    search: str = "auto"
    """How the evaluations outside the trainer (``realm evaluate-mlm``, the pipelines' start and end figures) find
    each query's blocks: ``exact`` (the blocks embedded now by the evaluated model, streamed ``exact_chunk_blocks``
    at a time), ``index`` (the run's live published index, which must be built from the evaluated step's weights) or
    ``auto`` (that index when it matches, ``exact`` otherwise). ``realm.pretrain.eval_search``."""
    exact_chunk_blocks: int = 65_536
    """Blocks embedded and scored at once by the exact search. Its peak memory is about
    ``exact_chunk_blocks x (embed_dim + min(max_examples, 1024)) x 4`` bytes plus ``max_examples x k x 12``, whatever
    the corpus size (65,536 blocks at 128 dims and 1,000 queries: about 300 MB)."""

    def __post_init__(self) -> None:
        problems = Problems()
        if self.search not in EVAL_SEARCH_MODES:
            problems.add(f"eval.search must be one of {', '.join(EVAL_SEARCH_MODES)}, got {self.search!r}")
        if self.exact_chunk_blocks < 1:
            problems.add(f"eval.exact_chunk_blocks must be >= 1, got {self.exact_chunk_blocks}")
        if self.max_examples < 1 or self.interval_examples < 0 or self.batch_size < 1:
            problems.add(
                f"eval needs max_examples >= 1, interval_examples >= 0 and batch_size >= 1, got {self.max_examples}, "
                f"{self.interval_examples} and {self.batch_size}"
            )
        problems.raise_if_any()


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
