"""``realm finetune``: ORQA/REALM open-domain QA fine-tuning over a frozen document index.

    realm finetune --config configs/finetune/demo.yaml [--task.name=nq --task.train=... --init.run=RUN ...]
    realm finetune --config C --task nq --train PATH --dev PATH --init-run RUN --out OUT     (shortcuts)

Each step: embed the questions with the live query tower, search the frozen index for the retriever beam, read the
top ``reader.reader_beam`` blocks, and minimise the marginal retriever + reader loss (``realm.qa_loss``). The dev set
is evaluated before training (the un-fine-tuned start), every ``eval_interval`` steps and at the end; predictions and
metrics go to ``OUT/eval/dev-step-N/``. The model is published to ``OUT/model/`` (manifest last).
"""

from __future__ import annotations

import argparse
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader

from realm import run_dir as rd
from realm.config import ConfigError, load_config, save_config, to_dict
from realm.index import IndexConfig
from realm.jsonl import DataFileError
from realm.logging import MetricsLogger, init_logging, progress, set_num_threads
from realm.model import ModelConfig
from realm.process_exit import exit_code_after_run
from realm.qa_batch import QACollator, QuestionSet
from realm.qa_data import LoadStats, load_task
from realm.qa_evaluation import QAContext, evaluate_qa
from realm.reader import ReaderConfig
from realm.retriever import RetrieverConfig
from realm.tracking import TrackingConfig, init_trackers
from realm.vocab import load_tokenizer
from trainer.accelerator import build_accelerator
from trainer.data import StepBatchSampler
from trainer.optim import OptimConfig, build_optimizer
from trainer.qa_eval import write_evaluation
from trainer.qa_setup import MODEL_DIR, TOKENIZER_DIR, InitConfig, frozen_index, qa_context, starting_point

logger = logging.getLogger(__name__)

TASKS = ("nq", "wq", "ct", "squad", "jsonl")


@dataclass(kw_only=True, slots=True)
class TaskConfig:
    """The questions: a task format and files (``hf:<split>`` reads nq_open / web_questions from the hub)."""

    name: str = "nq"
    """``nq``, ``wq``, ``ct`` (regex answers), ``squad`` or ``jsonl`` (generic, fields below)."""
    train: str = ""
    dev: str = ""
    """Evaluated at the start, every ``finetune.eval_interval`` steps and at the end (optional)."""
    question_field: str = "question"
    """``jsonl`` only."""
    answers_field: str = "answers"
    """``jsonl`` only."""
    regex: bool = False
    """``jsonl`` only: the answers are regular expressions."""
    skip_malformed: bool = False
    """Skip (and count) malformed records instead of stopping at the first one."""
    max_dev_questions: int = 0
    """Evaluate on the first N dev questions (0: all)."""

    def __post_init__(self) -> None:
        if self.name not in TASKS:
            raise ValueError(f"task.name must be one of {TASKS}, got {self.name!r}")

    def load(self, path: str, limit: int = 0):
        kw = {"skip_malformed": self.skip_malformed, "stats": LoadStats()}
        if self.name == "jsonl":
            kw.update(question_field=self.question_field, answers_field=self.answers_field, regex=self.regex)
        examples = load_task(self.name, path, **kw)
        if not examples:
            raise DataFileError(f"{path}: no questions")
        return examples[:limit] if limit else examples


@dataclass(kw_only=True, slots=True)
class FinetuneLoopConfig:
    out_dir: str = "runs/qa"
    max_steps: int = 2000
    batch_size: int = 16
    """Questions per process per step."""
    retriever_beam: int = 100
    """Blocks per question in the retriever's marginal loss (ORQA: 5000); also what top-k accuracy can see."""
    eval_interval: int = 0
    """Steps between dev evaluations (0: only at the start and the end)."""
    eval_at_start: bool = True
    eval_batch_size: int = 16
    log_interval: int = 20
    seed: int = 0
    num_threads: int = 0

    def __post_init__(self) -> None:
        if self.max_steps < 0 or self.batch_size <= 0 or self.retriever_beam <= 0:
            raise ValueError("max_steps must be >= 0, batch_size and retriever_beam positive")
        if self.eval_interval < 0 or self.log_interval <= 0 or self.eval_batch_size <= 0:
            raise ValueError("eval_interval must be >= 0, log_interval and eval_batch_size positive")


@dataclass(kw_only=True, slots=True)
class FinetuneConfig:
    finetune: FinetuneLoopConfig = field(default_factory=FinetuneLoopConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    init: InitConfig = field(default_factory=InitConfig)
    reader: ReaderConfig = field(default_factory=ReaderConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    """Shape of the networks when they start from scratch (neither ``init.run`` nor ``init.bert``)."""
    retriever: RetrieverConfig = field(default_factory=RetrieverConfig)
    """Embedder shape from scratch / from a BERT, and the block length the frozen index is embedded with."""
    index: IndexConfig = field(default_factory=IndexConfig)
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-5, warmup_steps=100))
    tracking: TrackingConfig = field(default_factory=TrackingConfig)


class Finetuner:
    def __init__(self, cfg: FinetuneConfig, accelerator: Accelerator | None = None) -> None:
        self.cfg = cfg
        self.out = Path(cfg.finetune.out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.accelerator = accelerator or build_accelerator(cfg.tracking, self.out)
        set_num_threads(cfg.finetune.num_threads)
        torch.manual_seed(cfg.finetune.seed)
        if not cfg.task.train:
            raise ConfigError("task.train is required (a question file, or hf:<split>)")
        # note: the question files are read first, so a bad path or record fails before any model or index work
        train_examples = cfg.task.load(cfg.task.train)
        dev_examples = cfg.task.load(cfg.task.dev, cfg.task.max_dev_questions) if cfg.task.dev else None
        start = starting_point(cfg.init, cfg.model, cfg.retriever, cfg.reader)
        self.tokenizer = load_tokenizer(start.tokenizer_path)
        is_main = self.accelerator.is_main_process
        if is_main:
            save_config(cfg, self.out / "config.yaml")
            self.tokenizer.save_pretrained(self.out / TOKENIZER_DIR)
            start.tokenizer_path = str((self.out / TOKENIZER_DIR).resolve())
            self.index = frozen_index(self.out, start, cfg.init, cfg.index)
        self.accelerator.wait_for_everyone()
        if not is_main:
            self.index = frozen_index(self.out, start, cfg.init, cfg.index, build=False)
        self.ctx: QAContext = qa_context(self.index, self.tokenizer, cfg.reader)
        max_question_length = cfg.reader.max_question_length
        self.train_set = QuestionSet(train_examples, self.tokenizer, max_question_length)
        self.dev_set = QuestionSet(dev_examples, self.tokenizer, max_question_length) if dev_examples else None
        logger.info(
            "%d training questions, %d dev questions, %d blocks in the frozen index %s",
            len(self.train_set),
            len(self.dev_set) if self.dev_set else 0,
            self.index.num_vectors,
            self.index.path,
        )
        optimizer, scheduler = build_optimizer(start.model, cfg.optim, max(cfg.finetune.max_steps, 1))
        # note: the scheduler stays unprepared: accelerate would step a prepared one once per process per call, so
        # with N processes the schedule would run N times too fast
        self.model, self.optimizer = self.accelerator.prepare(start.model, optimizer)
        self.scheduler = scheduler
        self.metrics = MetricsLogger(self.out / "metrics.jsonl" if is_main else None, self.accelerator)
        self.evaluations: list[tuple[int, dict[str, float]]] = []
        """(step, dev metrics) of each evaluation so far, on the main process."""
        init_trackers(self.accelerator, cfg.tracking, self.out, to_dict(cfg), job_type="finetune")

    @property
    def unwrapped(self):
        return self.accelerator.unwrap_model(self.model)

    def loader(self) -> DataLoader:
        acc, loop = self.accelerator, self.cfg.finetune
        sampler = StepBatchSampler(len(self.train_set), loop.batch_size, loop.seed, 0, acc.process_index,
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
        self.metrics.log({f"eval/{k}": v for k, v in metrics.items()}, step)
        logger.info("step %d dev: %s", step, {k: round(v, 4) for k, v in metrics.items()})
        return metrics

    def train(self) -> Path:
        loop, acc = self.cfg.finetune, self.accelerator
        if loop.eval_at_start:
            self.evaluate(0)
        batches = iter(self.loader())
        logger.info("fine-tuning on %d process(es) x batch %d = global batch %d (%s, mixed precision %s)",
                    acc.num_processes, loop.batch_size, acc.num_processes * loop.batch_size, acc.distributed_type,
                    acc.mixed_precision)  # fmt: skip
        t0 = time.perf_counter()
        window: dict[str, float] = {}
        bar = progress(loop.max_steps, "fine-tuning", unit="step", enabled=acc.is_main_process)
        for step in range(1, loop.max_steps + 1):
            batch = next(batches).to(acc.device)
            with torch.no_grad():
                query = self.unwrapped.embed_queries(batch)
            batch = self.ctx.attach(batch, query, self.train_set, loop.retriever_beam).to(acc.device)
            out = self.model(batch)
            losses = out.loss(batch)
            acc.backward(losses.loss)
            if self.cfg.optim.max_grad_norm > 0:
                acc.clip_grad_norm_(self.model.parameters(), self.cfg.optim.max_grad_norm)
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
            blocks = batch.blocks
            stats = {
                "train/loss": losses.loss.detach(),
                "train/retriever_loss": losses.retriever_loss.detach(),
                "train/reader_loss": losses.reader_loss.detach(),
                "train/answer_in_beam": blocks.has_answer.any(1).float().mean(),
                "train/answer_in_read_blocks": (blocks.span_correct & blocks.span_valid)
                .flatten(1)
                .any(1)
                .float()
                .mean(),
            }
            for key, value in stats.items():
                window[key] = window.get(key, 0.0) + float(acc.reduce(value.detach().float(), "mean"))
            if step % loop.log_interval == 0 or step == loop.max_steps:
                n = loop.log_interval if step % loop.log_interval == 0 else step % loop.log_interval
                logged = {k: v / n for k, v in window.items()}
                logged["time/step_s"] = (time.perf_counter() - t0) / step
                self.metrics.log(logged, step)
                logger.info("step %d loss %.4f (retriever %.4f, reader %.4f)", step, logged["train/loss"],
                            logged["train/retriever_loss"], logged["train/reader_loss"])  # fmt: skip
                window = {}
            bar.update(1)
            if loop.eval_interval and step % loop.eval_interval == 0 and step != loop.max_steps:
                self.evaluate(step)
        bar.close()
        final = self.save(loop.max_steps)
        if loop.max_steps > 0 or not loop.eval_at_start:
            self.evaluate(loop.max_steps)
        self.metrics.close()
        acc.end_training()
        return final

    def save(self, step: int) -> Path:
        """Publishes ``OUT/model`` (replacing an earlier one only once the new one is complete)."""
        final = self.out / MODEL_DIR
        if self.accelerator.is_main_process:
            staging = rd.new_staging(self.out)
            self.unwrapped.save_pretrained(staging)
            manifest = {"kind": "qa_model", "step": step, "task": self.cfg.task.name, "index": str(self.index.path.resolve()),
                        "tokenizer": TOKENIZER_DIR, "reader": to_dict(self.cfg.reader), "created": rd.now_iso()}  # fmt: skip
            previous = self.out / f".previous-{MODEL_DIR}"
            if final.exists():
                final.rename(previous)
            rd.publish_folder(staging, final, manifest)
            if previous.exists():
                rd.remove_folder(previous)
        self.accelerator.wait_for_everyone()
        return final


def _parse(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="realm finetune", description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=None, help="YAML config (configs/finetune/*.yaml)")
    parser.add_argument("--task", choices=TASKS, default=None, help="shortcut for --task.name")
    parser.add_argument("--train", default=None, help="shortcut for --task.train")
    parser.add_argument("--dev", default=None, help="shortcut for --task.dev")
    parser.add_argument("--init-run", default=None, help="shortcut for --init.run (a pre-training run)")
    parser.add_argument("--init-bert", default=None, help="shortcut for --init.bert (any BERT name or folder)")
    parser.add_argument("--out", default=None, help="shortcut for --finetune.out_dir")
    parser.add_argument("--report_to", default=None, help="shortcut for --tracking.report_to")
    return parser.parse_known_args(argv)


def main(argv: list[str] | None = None) -> int:
    args, overrides = _parse(argv)
    shortcuts = {"task.name": args.task, "task.train": args.train, "task.dev": args.dev, "init.run": args.init_run,
                 "init.bert": args.init_bert, "finetune.out_dir": args.out, "tracking.report_to": args.report_to}  # fmt: skip
    overrides += [f"--{key}={value}" for key, value in shortcuts.items() if value is not None]
    init_logging()
    cfg = load_config(FinetuneConfig, args.config, overrides)
    tuner = Finetuner(cfg)
    print(tuner.train())
    return exit_code_after_run(tuner.accelerator.num_processes, 0)


if __name__ == "__main__":
    raise SystemExit(main())
