"""``realm finetune``: ORQA/REALM open-domain QA fine-tuning over a frozen document index.

    realm finetune --config configs/finetune/demo.yaml --init.run=RUN --task.name=nq --task.train=PATH \
        --task.dev=PATH --train.run_dir=OUT [--section.key=value ...]

Each step: embed the questions with the live query tower, search the frozen index for the retriever beam (with
``--retrieval.candidates=bm25``, take BM25's top blocks of each question instead, ranked once at start-up), read the
top ``reader.reader_beam`` blocks, and minimise the marginal retriever + reader loss (``realm.qa.loss``). The dev set
is evaluated before training (the un-fine-tuned start), every ``eval_interval`` steps and at the end; predictions and
metrics go to ``OUT/eval/dev-step-N/``. The model is published to ``OUT/model/`` (manifest last). Checkpoints in
``OUT/checkpoints/`` let a stopped run resume exactly (``train.resume``), as every training job does.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader

from realm.core.checks import Problems
from realm.core.config import config_from_command_line, to_dict
from realm.core.errors import ConfigError, run_command
from realm.core.logging import eta, init_logging, progress
from realm.core.process_exit import exit_code_after_run
from realm.core.tracking import TrackingConfig, init_trackers
from realm.data.blocks import BlocksInput, check_blocks_tokenizer
from realm.finetune.evaluate_qa import write_evaluation
from realm.finetune.setup import MODEL_DIR, TOKENIZER_DIR, InitConfig, frozen_index, qa_context, starting_point
from realm.finetune.task import TaskConfig
from realm.index.mips import IndexConfig
from realm.models.bert import ModelConfig
from realm.models.pretrained import load_model_tokenizer
from realm.models.reader import ReaderConfig
from realm.models.retriever import RetrieverConfig
from realm.qa.batch import QABatch, QACollator
from realm.qa.candidates import RetrievalConfig
from realm.qa.qa_eval import DEFAULT_TOP_K, QAContext, evaluate_qa
from realm.run import layout, publication
from realm.training.accelerator import build_accelerator
from realm.training.lineage import (
    QA_INDEX,
    QA_MODEL,
    index_artifact,
    model_artifact,
    track_folder,
    update_summary,
    wandb_run,
)
from realm.training.optim import OptimConfig
from realm.training.preemption import Preempted, Preemption, stop_if_preempted
from realm.training.sampler import StepBatchSampler
from realm.training.scaffold import LoopConfig, TrainingLoop, iterate, start_job

logger = logging.getLogger(__name__)


@dataclass(kw_only=True, slots=True)
class FinetuneLoopConfig(LoopConfig):
    run_dir: str = "runs/qa"
    max_steps: int = 2000
    batch_size: int = 16
    """Questions per process per step."""


@dataclass(kw_only=True, slots=True)
class FinetuneTaskConfig:
    """What fine-tuning does besides the loop: the retriever beam and the dev evaluations."""

    retriever_beam: int = 100
    """Blocks per question in the retriever's marginal loss (ORQA: 5000); also what top-k accuracy can see."""
    eval_interval: int = 0
    """Steps between dev evaluations (0: only at the start and the end)."""
    eval_at_start: bool = True
    eval_batch_size: int = 16

    def __post_init__(self) -> None:
        problems = Problems()
        if self.retriever_beam <= 0 or self.eval_interval < 0 or self.eval_batch_size <= 0:
            problems.add("retriever_beam and eval_batch_size must be positive, eval_interval >= 0")
        problems.raise_if_any()


@dataclass(kw_only=True, slots=True)
class FinetuneConfig:
    train: FinetuneLoopConfig = field(default_factory=FinetuneLoopConfig)
    finetune: FinetuneTaskConfig = field(default_factory=FinetuneTaskConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    init: InitConfig = field(default_factory=InitConfig)
    data: BlocksInput = field(default_factory=BlocksInput)
    """Tokenizer and blocks; required without ``init.run`` (default with ``init.bert``: the BERT's own tokenizer)."""
    reader: ReaderConfig = field(default_factory=ReaderConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    """Shape of the networks when they start from scratch (neither ``init.run`` nor ``init.bert``)."""
    retriever: RetrieverConfig = field(default_factory=RetrieverConfig)
    """Embedder shape from scratch / from a BERT, and the block length the frozen index is embedded with."""
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    """Where each question's candidate blocks come from (the dense search, or BM25); recorded in the model's
    manifest so that ``realm evaluate`` reads the same candidates."""
    index: IndexConfig = field(default_factory=IndexConfig)
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-5, warmup_steps=100))
    tracking: TrackingConfig = field(default_factory=TrackingConfig)


class Finetuner:
    def __init__(self, cfg: FinetuneConfig, accelerator: Accelerator | None = None) -> None:
        self.cfg = cfg
        self.accelerator = accelerator or build_accelerator(cfg.tracking, cfg.train.run_dir, cfg.train.precision)
        if not cfg.task.train:
            raise ConfigError("task.train is required (a question file, or hf:<split>)")
        self.out = start_job(cfg.train, self.accelerator, cfg)
        # note: the question files are read first, so a bad path or record fails before any model or index work
        train_examples = cfg.task.load(cfg.task.train)
        dev_examples = cfg.task.load(cfg.task.dev, cfg.task.max_dev_questions, dev=True) if cfg.task.dev else None
        start = starting_point(cfg.init, cfg.data, cfg.model, cfg.retriever, cfg.reader)
        if cfg.retrieval.center_queries is None:
            # note: resolved here, so the model's manifest (what `realm evaluate` searches with) records a bool
            cfg.retrieval = dataclasses.replace(cfg.retrieval, center_queries=start.centred_search
                                                and cfg.retrieval.candidates == "dense")  # fmt: skip
        # note: with init.bert, a data.tokenizer of another vocabulary is refused, naming both
        self.tokenizer = load_model_tokenizer(start.tokenizer_path, cfg.init.bert or None)
        # note: before the frozen index embeds every block, work that a mismatch would waste
        check_blocks_tokenizer(start.blocks_path, self.tokenizer)
        is_main = self.accelerator.is_main_process
        if is_main:
            self.tokenizer.save_pretrained(self.out / TOKENIZER_DIR)
            start.tokenizer_path = str((self.out / TOKENIZER_DIR).resolve())
            self.index = frozen_index(self.out, start, cfg.init, cfg.index)
        self.accelerator.wait_for_everyone()
        if not is_main:
            self.index = frozen_index(self.out, start, cfg.init, cfg.index, build=False)
        self.ctx: QAContext = qa_context(self.index, self.tokenizer, cfg.reader, cfg.retrieval)
        self.train_set = self.ctx.question_set(train_examples, cfg.finetune.retriever_beam)
        # note: evaluate_qa retrieves max(DEFAULT_TOP_K) blocks per question, whatever the training beam
        self.dev_set = self.ctx.question_set(dev_examples, max(DEFAULT_TOP_K)) if dev_examples else None
        logger.info(
            "%d training questions, %d dev questions, %d blocks in the frozen index %s, %s candidates",
            len(self.train_set),
            len(self.dev_set) if self.dev_set else 0,
            self.index.num_vectors,
            self.index.path,
            cfg.retrieval.candidates,
        )
        self.loop = TrainingLoop.prepare(self.accelerator, cfg.train, cfg.optim, start.model, cfg,
                                         max(cfg.reader.max_sequence_length, start.max_block_length))  # fmt: skip
        self.model = self.loop.model
        self.evaluations: list[tuple[int, dict[str, float]]] = []
        """(step, dev metrics) of each evaluation so far, on the main process."""
        init_trackers(self.accelerator, cfg.tracking, self.out, to_dict(cfg), job_type="finetune")
        track_inputs(self.accelerator, cfg.init, self.index)

    @property
    def unwrapped(self):
        return self.accelerator.unwrap_model(self.model)

    def loader(self, start_step: int) -> DataLoader:
        acc, loop = self.accelerator, self.cfg.train
        sampler = StepBatchSampler(len(self.train_set), loop.batch_size, loop.seed, start_step, acc.process_index,
                                   acc.num_processes)  # fmt: skip
        collate = QACollator(self.train_set, self.ctx.special, self.cfg.reader.max_question_length)
        return DataLoader(self.train_set, batch_sampler=sampler, collate_fn=collate)

    def evaluate(self, step: int) -> dict[str, float] | None:
        """Dev metrics at ``step``; call on every process (each evaluates its shard), returned on the main one."""
        if self.dev_set is None:
            return None
        metrics, records = evaluate_qa(
            self.unwrapped,
            self.dev_set,
            self.ctx,
            batch_size=self.cfg.finetune.eval_batch_size,
            accelerator=self.accelerator,
        )
        if not self.accelerator.is_main_process:
            return None
        write_evaluation(self.out, f"dev-step-{step}", metrics, records, self.accelerator, step)
        self.evaluations.append((step, metrics))
        self.loop.metrics.log({f"eval/{k}": v for k, v in metrics.items()}, step)
        logger.info("QA step %d/%d dev: %s", step, self.cfg.train.max_steps,
                    {k: round(v, 4) for k, v in metrics.items()})  # fmt: skip
        return metrics

    def train(self) -> Path:
        cfg, acc, loop = self.cfg, self.accelerator, self.loop
        loop.resume()
        if cfg.finetune.eval_at_start and loop.step == 0:
            self.evaluate(0)
        batches = iterate(self.loader(loop.step))
        logger.info("fine-tuning on %d process(es) x batch %d = global batch %d (%s, mixed precision %s)",
                    acc.num_processes, cfg.train.batch_size, acc.num_processes * cfg.train.batch_size,
                    acc.distributed_type, acc.mixed_precision)  # fmt: skip
        t0, first = time.perf_counter(), loop.step
        bar = progress(cfg.train.last_step, "fine-tuning", unit="step", initial=loop.step, enabled=acc.is_main_process)
        with Preemption() as preemption:  # note: a SIGTERM or SIGUSR1 ends the job at a step boundary, checkpointed
            while not loop.done:
                self.train_step(next(batches).to(acc.device))
                bar.update(1)
                logged = loop.end_step("train", {"time/step_s": (time.perf_counter() - t0) / (loop.step - first)})
                if logged:
                    logger.info("QA step %d/%d loss %.4f (retriever %.4f, reader %.4f) %s", loop.step,
                                cfg.train.max_steps, logged["train/loss"], logged["train/retriever_loss"],
                                logged["train/reader_loss"], eta(loop.step, cfg.train.max_steps, (t0, first)))
                if loop.eval_due(cfg.finetune.eval_interval) and loop.step != cfg.train.max_steps:  # the end: below
                    self.evaluate(loop.step)
                stop_if_preempted(preemption, loop, "train")
        bar.close()
        final = self.out / MODEL_DIR
        if loop.step >= cfg.train.max_steps:
            final = self.save(cfg.train.max_steps)
            if cfg.train.max_steps > 0 or not cfg.finetune.eval_at_start:
                self.evaluate(cfg.train.max_steps)
            self.track_outputs(final)
        loop.close()
        acc.end_training()
        return final

    def track_outputs(self, final: Path) -> None:
        """The published QA model as the ``qa-model`` artefact, and the run's end figures (the last dev evaluation,
        the steps, where the model is) in the W&B run's summary; no-op without W&B."""
        run = wandb_run(self.accelerator)
        if run is None:
            return
        step = self.cfg.train.max_steps
        last = {f"eval/{k}": v for k, v in self.evaluations[-1][1].items()} if self.evaluations else {}
        update_summary(self.accelerator, {**last, "step": step, "model": str(final.resolve())})
        alias = publication.folder_name(layout.CHECKPOINT_PREFIX, step)
        track_folder(run, self.out, QA_MODEL, QA_MODEL, {"model": final}, alias=alias, metadata={"step": step})

    def train_step(self, batch: QABatch) -> None:
        """One optimizer step on a batch of questions: search, read, the marginal losses, their metrics."""
        acc, loop = self.accelerator, self.loop
        query = None  # note: fixed (BM25) candidates need no search, so no query pass before the model's own
        if self.train_set.candidates is None:
            with torch.no_grad():
                query = self.unwrapped.embed_queries(batch)
        batch = self.ctx.attach(batch, query, self.train_set, self.cfg.finetune.retriever_beam).to(acc.device)
        out = self.model(batch)
        losses = out.loss(batch)
        acc.backward(losses.loss)
        blocks = batch.blocks
        read = (blocks.span_correct & blocks.span_valid).flatten(1).any(1)
        loop.window.add({
            "loss": losses.loss, "retriever_loss": losses.retriever_loss, "reader_loss": losses.reader_loss,
            "answer_in_beam": blocks.has_answer.any(1).float().mean(), "answer_in_read_blocks": read.float().mean(),
        })  # fmt: skip
        loop.optimizer_step()

    def save(self, step: int) -> Path:
        """Publishes ``OUT/model`` (replacing an earlier one only once the new one is complete)."""
        final = self.out / MODEL_DIR
        if self.accelerator.is_main_process:
            manifest = {"kind": "qa_model", "step": step, "task": self.cfg.task.name, "index": str(self.index.path.resolve()),
                        "tokenizer": TOKENIZER_DIR, "reader": to_dict(self.cfg.reader),
                        "retrieval": to_dict(self.cfg.retrieval)}  # fmt: skip
            publication.replace_published(final, self.unwrapped.save_pretrained, manifest)
        self.accelerator.wait_for_everyone()
        return final


def track_inputs(accelerator: Accelerator, init: InitConfig, index) -> None:
    """The W&B lineage of what fine-tuning starts from: a pre-training run's model (the checkpoint it loads) as an
    input; the frozen index as an input when it is another run's (``init.index``), else as an output of this run (it
    was built here from the starting document embedder). No-op without W&B."""
    run = wandb_run(accelerator)
    if run is None:
        return
    if init.run:
        published = publication.list_published(layout.checkpoints_dir(init.run), layout.CHECKPOINT_PREFIX)
        checkpoint = init.checkpoint or (str(published[-1][1]) if published else "")
        if checkpoint:
            model_artifact(accelerator, init.run, checkpoint, used=True)
    if init.index:
        index_artifact(run, index.path, index.step, used=True)
    else:
        index_artifact(run, index.path, index.step, used=False, kind=QA_INDEX)


def main(argv: list[str] | None = None) -> int:
    cfg = config_from_command_line(FinetuneConfig, argv, "realm finetune", __doc__.splitlines()[0])
    init_logging()
    tuner = Finetuner(cfg)
    try:
        print(tuner.train())
    except Preempted as stop:  # note: its checkpoint is written; the process ends as a finished one does
        tuner.accelerator.end_training()
        return exit_code_after_run(tuner.accelerator.num_processes, stop.code)
    return exit_code_after_run(tuner.accelerator.num_processes, 0)


if __name__ == "__main__":
    raise SystemExit(run_command("realm finetune", main, sys.argv[1:]))
