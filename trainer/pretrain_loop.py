"""The pre-training loop: owns the optimizer step, retriever exports, evaluation and checkpoints.

Index refresh is asynchronous: the builder (another process) publishes versions, and ``realm.trainer.index_sync`` swaps
them in between steps, agreed across processes, blocking only past ``refresh.max_staleness``.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Mapping, NoReturn

import torch
from accelerate import Accelerator

from realm.core.logging import eta, progress
from realm.core.process_exit import exit_code_after_run
from realm.data.block_store import BlockStore
from realm.data.blocks import check_blocks_tokenizer, load_blocks
from realm.data.packing import SpecialIds
from realm.index.build_version import blocks_fingerprint
from realm.index.versions import PublishedIndex
from realm.models.pretrained import load_model_tokenizer
from realm.pretrain.batch import RealmBatch
from realm.pretrain.candidates import attach_chosen, start_search
from realm.pretrain.config import PretrainConfig
from realm.pretrain.data import prepared_sentences, pretrain_loader
from realm.pretrain.heldout_eval import evaluate_heldout, gold_titles
from realm.pretrain.loss import get_loss
from realm.pretrain.model import RealmModel, build_model
from realm.pretrain.retrieval_table import log_retrieval_table, retrieval_rows
from realm.pretrain.step import LOSS_UNITS, StepOutput, batch_counts, train_step
from realm.run.layout import (
    EXPORT_STEP,
    INDEX_STEP,
    RETRIEVALS_FILE,
    clear_done,
    export_retriever,
    has_version,
    latest_retriever_export,
    mark_done,
    retriever_dir,
)
from realm.run.live_index import discard_after
from realm.run.publication import clean_staging
from realm.trainer.builder_process import ChildBuilder, start_held_builder
from realm.trainer.candidate_prefetch import CandidatePipeline
from realm.trainer.index_sync import IndexSync, RunTotals
from realm.trainer.index_watcher import IndexWatcher
from realm.trainer.run_summary import run_summary
from realm.trainer.run_tracking import end_tracking, start_tracking, track_export
from realm.training.accelerator import build_accelerator
from realm.training.optim import retriever_lr
from realm.training.preemption import PREEMPTED_EXIT_CODE, Preemption
from realm.training.sampler import check_fills_batch
from realm.training.scaffold import TrainingLoop, hold_run_dir, iterate, removed_if_setup_fails, start_job

logger = logging.getLogger(__name__)


class Trainer:
    def __init__(self, cfg: PretrainConfig, accelerator: Accelerator | None = None) -> None:
        self.cfg = cfg
        self.accelerator = accelerator or build_accelerator(cfg.tracking, cfg.train.run_dir, cfg.train.precision)
        with (removed_if_setup_fails(cfg.train.run_dir, self.accelerator.is_main_process),
              contextlib.ExitStack() as held):  # fmt: skip
            held.enter_context(hold_run_dir(cfg.train.run_dir, self.accelerator))  # before anything in the run changes
            self.builder: ChildBuilder | None = None
            try:
                self._set_up(cfg)
            except BaseException:
                if self.builder is not None:
                    self.builder.stop()  # note: before the run folder of a failed fresh start is removed
                raise
            self._run_lock = held.pop_all()  # note: released by close() (or by the OS when the process dies)

    def _set_up(self, cfg: PretrainConfig) -> None:
        """Inputs, model, optimizer, the resumed state and the index side (nothing runs yet but the child builder,
        held until ``run``)."""
        self.run_dir = start_job(cfg.train, self.accelerator, cfg)
        # note: first, so that the builder's start-up overlaps everything below (the first index waited on it)
        if cfg.refresh.spawn_builder and self.accelerator.is_main_process:
            self.builder = start_held_builder(cfg.refresh, cfg.tracking, self.run_dir, self.accelerator)

        self.tokenizer = load_model_tokenizer(cfg.data.tokenizer, cfg.model.init_from)
        check_blocks_tokenizer(cfg.data.blocks, self.tokenizer)
        self.special = SpecialIds.of(self.tokenizer)
        self.store = BlockStore(load_blocks(cfg.data.blocks))
        cache = Path(cfg.data.cache_dir or self.run_dir / "data")
        with self.accelerator.main_process_first():
            self.sentences = prepared_sentences(cfg.data.sentences, self.tokenizer, cfg.data.tagging,
                                                cfg.retriever.max_query_length, cache, cfg.data.heldout_sentences,
                                                cfg.data.tag_stage)  # fmt: skip
            self.heldout = (
                prepared_sentences(cfg.data.heldout, self.tokenizer, None, cfg.retriever.max_query_length, cache)
                if cfg.data.heldout
                else None
            )
        # note: read once; every periodic evaluation uses the same gold articles
        self.heldout_titles = gold_titles(cfg.data.heldout) if cfg.data.heldout else None
        self.num_processes = self.accelerator.num_processes
        self.global_batch_size = cfg.train.batch_size * self.num_processes * cfg.train.grad_accum_steps
        check_fills_batch(len(self.sentences), self.global_batch_size, cfg.data.sentences)  # before any export or build

        model = build_model(cfg, len(self.tokenizer))
        self.loop = TrainingLoop.prepare(self.accelerator, cfg.train, cfg.optim, model, cfg,
                                         cfg.retriever.max_reader_length)  # fmt: skip
        self.model, self.optimizer, self.scheduler = self.loop.model, self.loop.optimizer, self.loop.scheduler
        self.loss_fn = get_loss(cfg.train.loss)
        self.schedule = cfg.refresh.schedule(initial_only=cfg.retriever.frozen)  # a frozen retriever: one index
        self.loop.appended_logs.append(RETRIEVALS_FILE)
        self.load_state_dict(self.loop.resume())  # before the index side below, which starts from what it restores
        self.metrics = self.loop.metrics
        prefetch = cfg.train.prefetch_candidates
        self.candidates = CandidatePipeline(self.start_retrieval, self.accelerator.device, prefetch)
        if self.loop.rank_tensors and prefetch:
            self.candidates.restore(self.loop.rank_tensors)
        start_tracking(self)
        self.watcher = IndexWatcher(
            self.run_dir, cfg.refresh.poll_interval_s, corpus_fingerprint=blocks_fingerprint(self.store.blocks)
        )
        self.sync = IndexSync(
            self.run_dir,
            self.accelerator,
            self.watcher,
            self.totals,
            builder_failure=lambda: self.builder.failure() if self.builder is not None else None,
        )
        self._start_wall, self._wall_before = time.perf_counter(), self.totals.wall_s  # reset by run()
        self.preemption, self._preempted = Preemption(), False

    @property
    def step(self) -> int:
        """Optimizer steps taken so far (the scaffold counts them)."""
        return self.loop.step

    @property
    def unwrapped(self) -> RealmModel:
        return self.accelerator.unwrap_model(self.model)

    @property
    def index(self) -> PublishedIndex | None:
        """The index this process searches (the same version on every process)."""
        return self.sync.index

    # ------------------------------------------------------------------------------------------- checkpointed state

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of the trainer itself (torchtitan's Stateful trainer): the index version it searched,
        the export the next steps wait for (``EXPORT_STEP``, so that it is pinned: ``realm.run.layout.pinned_steps``)
        and the run's totals. The scaffold adds the step and log sizes; accelerate saves model, optimizer and RNG."""
        totals = replace(self.totals, wall_s=self._wall_now())
        index_step = self.index.step if self.index else None
        return {INDEX_STEP: index_step, EXPORT_STEP: self.schedule.last_export(self.step), "totals": asdict(totals)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores ``state_dict``'s state ({}: a fresh run). ``resumed_index_step`` is the index version the checkpoint
        searched (None for a fresh run): a resumed run starts on it."""
        self.resumed_index_step: int | None = state.get(INDEX_STEP)
        self.totals = RunTotals(**state.get("totals", {}))

    # ------------------------------------------------------------------------------------------- index side

    def export_retriever(self) -> None:
        """Publishes the current document embedder for the builder (main process only), never non-finite weights."""
        self.loop.check_finite()  # note: on every process (a collective check)
        if self.accelerator.is_main_process:
            # note: export_retriever makes the blocks and a local tokenizer path absolute
            export_retriever(self.run_dir, self.step, self.unwrapped.retriever, blocks_path=self.cfg.data.blocks,
                             tokenizer_path=self.cfg.data.tokenizer, keep=self.cfg.refresh.keep_exports,
                             max_block_length=self.cfg.retriever.max_block_length)  # fmt: skip
            self.totals.num_exports += 1
            track_export(self)

    # ------------------------------------------------------------------------------------------- loop

    def run(self) -> dict:
        cfg = self.cfg
        self._start_wall, self._wall_before, self._start_step = time.perf_counter(), self.totals.wall_s, self.step
        if self.accelerator.is_main_process:
            clear_done(self.run_dir)
            clean_staging(retriever_dir(self.run_dir))  # exports a crashed trainer left half-written
            # exports and indexes a killed run made after this checkpoint (a fresh start asked for: all of them)
            discard_after(self.run_dir, -1 if cfg.train.resume == "never" else self.step)
        if self._needs_initial_export():
            self.export_retriever()
        if self.builder is not None:
            self.builder.release()
        self.watcher.start()
        self.preemption.install()  # note: from here a SIGTERM or SIGUSR1 ends the run at a step boundary, checkpointed
        logger.info("training on %d process(es) x batch %d x %d micro-batch(es) = global batch %d (%s, mixed precision "
                    "%s)", self.num_processes, cfg.train.batch_size, cfg.train.grad_accum_steps, self.global_batch_size,
                    self.accelerator.distributed_type, self.accelerator.mixed_precision)  # fmt: skip
        self.sync.start_at(self.start_version(), self.step, cfg.refresh.initial_index_timeout_s)

        loader = pretrain_loader(self.sentences, self.special, cfg.data,
                                 max_query_length=cfg.retriever.max_query_length,
                                 batch_size=cfg.train.batch_size, seed=cfg.train.seed, start_step=self.step,
                                 rank=self.accelerator.process_index, world_size=self.num_processes,
                                 accum_steps=cfg.train.grad_accum_steps)  # fmt: skip
        micro_batches = iterate(loader)
        if self.step == 0 and self.loop.eval_due(cfg.train.eval_interval):
            self.evaluate()  # the curve's first point: the starting model on the first index

        def next_step_batches() -> list[RealmBatch]:
            return list(itertools.islice(micro_batches, cfg.train.grad_accum_steps))

        upcoming: list[RealmBatch] = []  # the next step's micro-batches, when they are searched ahead
        t_window = time.perf_counter()
        bar = progress(
            cfg.train.last_step, "training", unit="step", initial=self.step, enabled=self.accelerator.is_main_process
        )
        while not self.loop.done:
            if self.builder is not None:
                self.builder.check()
            if cfg.refresh.swap_lag >= 0:
                self.sync.swap_due(self.step, self.due_version(), cfg.refresh.initial_index_timeout_s)
            else:
                self.sync.maybe_swap(self.step, cfg.refresh.max_staleness, cfg.refresh.initial_index_timeout_s,
                                     self.schedule.last_export(self.step))  # fmt: skip
            current = upcoming or next_step_batches()
            # note: up to max_steps, not last_step: a run stopped early searches ahead like an uninterrupted one, and
            # its checkpoint keeps that choice (exact resume, realm.trainer.candidate_prefetch)
            upcoming = next_step_batches() if self.candidates.prefetch and self.step + 1 < cfg.train.max_steps else []
            batch, out = self.optimizer_step(current, following=upcoming[0] if upcoming else None)
            bar.update(1)

            if self.schedule.is_due(self.step):
                self.export_retriever()
            if self.loop.log_due():
                self.log_window(time.perf_counter() - t_window)
                t_window = time.perf_counter()
            if cfg.tracking.is_inspect_due(self.step) and self.accelerator.is_main_process:
                self.log_retrievals(batch, out.output)
            if self.loop.eval_due(cfg.train.eval_interval):
                self.evaluate()
            if self.loop.save_due():
                self.save()
            # note: a collective, after everything of the step, so a resumed run needs nothing of it redone
            if not self.loop.done and (signum := self.preemption.agreed(self.accelerator)):
                self.stop_preempted(signum, time.perf_counter() - t_window)
        bar.close()
        self.totals.wall_s = self._wall_now()
        return self.summary()

    def start_version(self) -> int:
        """The index version this invocation starts on: the one the checkpoint searched (the same version an
        uninterrupted run searched at that step, whether or not the checkpoint is at a refresh step), or for a fresh
        run the initial export's."""
        if self.step > 0 and self.resumed_index_step is not None:
            return self.resumed_index_step
        return self.due_version() if self.cfg.refresh.swap_lag >= 0 else 0

    def _needs_initial_export(self) -> bool:
        """A fresh run exports its starting weights. A resumed one keeps the exports it made on schedule (its checkpoint
        pins the version it searched, ``realm.run.layout.pinned_steps``): re-exporting at the resume step would give
        it an index the uninterrupted run never had, so it does so only when nothing is left to resume on (a run
        directory written before pins existed)."""
        if latest_retriever_export(self.run_dir) is not None:
            return False
        resumed = self.resumed_index_step
        return self.step == 0 or resumed is None or not has_version(self.run_dir, resumed)

    def due_version(self) -> int:
        """Under ``refresh.swap_lag``: the index version live before the next step, the newest export at least
        ``swap_lag`` steps old."""
        return self.schedule.last_export(max(self.step - self.cfg.refresh.swap_lag, 0))

    def _wall_now(self) -> float:
        """Wall seconds of the whole run so far, earlier invocations of a resumed run included."""
        return self._wall_before + time.perf_counter() - self._start_wall

    def optimizer_step(
        self, micro_batches: list[RealmBatch], following: RealmBatch | None = None
    ) -> tuple[RealmBatch, StepOutput]:
        """Retrieval, forward and backward for each of this process's micro-batches, then one optimizer step.

        Each micro-batch's mean loss is weighted by its share of the units (masked tokens for the REALM loss) of the
        whole global batch, times the number of processes since DDP averages gradients over them. The accumulated
        gradient is then exactly that of the global batch's mean loss: N processes x A micro-batches step like one
        process with the whole batch, even when masks differ in length or the collator rejected examples.
        With ``train.prefetch_candidates``, each micro-batch's search runs while the one before it trains, and
        ``following`` (the next step's first micro-batch) is searched during the last. Returns the last micro-batch
        and its ``StepOutput`` (for retrieval tables).
        """
        unit = LOSS_UNITS[self.cfg.train.loss]
        local = torch.stack([batch_counts(b)[unit] for b in micro_batches]).float()
        total = local.sum()
        if self.num_processes > 1:
            total = self.accelerator.reduce(total.to(self.accelerator.device), reduction="sum").cpu()
        weights = local * self.num_processes / total.clamp_min(1.0)
        for i, batch in enumerate(self.candidates.batches(micro_batches, following)):
            # note: accelerate's accumulate() would divide each loss by the number of micro-batches; the weights above
            # already normalise by the global count, so only the all-reduce is deferred to the last micro-batch
            last = i == len(micro_batches) - 1
            with contextlib.nullcontext() if last else self.accelerator.no_sync(self.model):
                out = train_step(self.model, batch, self.loss_fn, unit)
                self.accelerator.backward(out.loss * weights[i].item())
            self.loop.window.add(out.metrics, out.counts)
        self.loop.optimizer_step()
        return batch, out

    def start_retrieval(self, batch: RealmBatch, chosen: torch.Tensor | None):
        """``CandidatePipeline``'s retrieval of a host micro-batch: its queries embedded now, the search and packing
        returned to run (``chosen``: no search, pack these block ids)."""
        cfg = self.cfg.retriever
        if chosen is not None:
            return functools.partial(attach_chosen, batch, chosen, self.store, self.special, cfg)
        # note: the index is bound now: a swap before the search runs must not change which version it reads
        autocast = self.accelerator.autocast()
        return start_search(self.unwrapped, batch, self.index, self.store, self.special, cfg, autocast)

    def log_window(self, seconds: float) -> None:
        """The window's metrics (reduced over processes by the scaffold) with index and timing figures, logged once."""
        num_steps = self.loop.window.num_steps
        wall = self._wall_now()
        extra = {
            "train/lr": self.scheduler.get_last_lr()[0],
            "index/version": self.index.step,
            "index/staleness": max(self.step - self.index.step, 0),
            "index/num_refreshes": self.totals.num_index_refreshes,
            "time/step_s": seconds / num_steps,
            "time/retrieve_s": self.candidates.critical_s / num_steps,
            "time/index_wait_s": self.totals.index_wait_s,
            "time/index_wait_fraction": self.totals.index_wait_s / wall if wall else 0.0,
            "time/refresh_wait_fraction": self.totals.refresh_wait_s / wall if wall else 0.0,
            "train/world_size": self.num_processes,
        }
        if (rate := retriever_lr(self.optimizer)) is not None:
            extra["train/retriever_lr"] = rate  # its own warm-up and scale (optim.retriever_*)
        plain, _ = self.loop.log_window("train", extra)
        self.candidates.critical_s = 0.0
        logger.info("step %d/%d loss %.4f acc %.3f utility %.3f null %.3f index v%d (stale %d) %.3f s/step %s",
                    self.step, self.cfg.train.max_steps, plain["train/loss"], plain["train/mlm_accuracy"],
                    plain["train/retrieval_utility"], plain["train/null_doc_prob"], self.index.step,
                    self.step - self.index.step, plain["time/step_s"],
                    eta(self.step, self.cfg.train.max_steps, (self._start_wall, self._start_step)))  # fmt: skip

    def log_retrievals(self, batch, output) -> None:
        """A table of what each sampled query retrieved, p(z|x), p(y|z,x) (W&B and RUN/retrievals.jsonl)."""
        rows = retrieval_rows(batch, output, self.store, self.tokenizer, index_version=self.index.step,
                              staleness=max(self.step - self.index.step, 0), step=self.step,
                              max_rows=self.cfg.tracking.num_inspect_rows)  # fmt: skip
        log_retrieval_table(self.accelerator, rows, self.step, self.run_dir)

    def evaluate(self) -> dict:
        """Held-out evaluation on the live index (main process), a point of the learning curve."""
        if self.heldout is None or not self.accelerator.is_main_process:
            return {}
        with self.accelerator.autocast():  # note: in the run's precision, as the trainer's own forward passes
            result = evaluate_heldout(
                self.unwrapped, self.heldout, self.store, self.special, self.cfg.retriever, index=self.index,
                batch_size=self.cfg.eval.batch_size, gold_titles=self.heldout_titles,
                max_examples=self.cfg.eval.interval_examples or self.cfg.eval.max_examples,
            ).as_dict()  # fmt: skip
        self.metrics.log(result, self.step)
        return result

    def save(self) -> None:
        self.loop.save(self.state_dict(), rank_tensors=self.candidates.pending_choice())

    def summary(self) -> dict:
        return run_summary(self.totals, step=self.step, world_size=self.num_processes,
                           global_batch_size=self.global_batch_size,
                           final_index_version=self.index.step if self.index else None)  # fmt: skip

    def stop_preempted(self, signum: int, window_s: float) -> NoReturn:
        """Ends the run after this step, preempted: the steps since the last log are logged (as at a run's last step),
        this step is checkpointed (unless its schedule just did), then ``Preempted``; ``close`` ends the process."""
        if self.loop.window.num_steps:
            self.log_window(window_s)
        if not self.loop.save_due():
            self.save()
        self._preempted = True
        raise self.preemption.stop(self.accelerator, self.step, signum)

    def close(self) -> None:
        """Stops the watcher and the child builder; marks the run done so a standalone builder exits (unless
        preempted: the requeued run continues on the same index)."""
        self.watcher.close()
        self.candidates.close()
        self.loop.close()
        end_tracking(self, completed=not self._preempted)
        self.accelerator.end_training()  # finishes trackers (writes the offline W&B run)
        if self.accelerator.is_main_process and not self._preempted:  # a preempted run comes back: builders wait
            mark_done(self.run_dir)
        if self.builder is not None:
            self.builder.stop()
        self._run_lock.close()
        self.preemption.restore()
        if self._preempted:  # note: a process of a multi-process run ends here, as a finished one (process_exit)
            exit_code_after_run(self.num_processes, PREEMPTED_EXIT_CODE)
