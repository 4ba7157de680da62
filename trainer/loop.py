"""The pre-training loop: owns the optimizer step, retriever exports, index swaps, evaluation and checkpoints.

The index is never refreshed inside a step. The builder (another process) publishes new versions; a watcher thread
loads them off the critical path; the loop swaps the newest one in between steps and blocks only when the index it
has is more than ``max_staleness`` steps old (or when it has none yet).

With N processes (DDP through accelerate) each process runs its own watcher and retrieves for its own micro-batches
from its own read-only copy of the index. Which version is live is agreed collectively: a process swaps a version in
only in the step in which every process has loaded that same version (one all-gather of an int per step), so all
processes always search the same index and the swap step is the same everywhere. Waiting is collective too: every
process takes part in each round of the wait (about one a second), a failure seen by any of them (the child builder
gone, a timeout) ends the wait on all of them at once, and the staleness target is the main process's view.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from accelerate import Accelerator

from realm.batch import RealmBatch
from realm.blocks import load_blocks
from realm.config import save_config, to_dict
from realm.encoder import KnowledgeAugmentedEncoder
from realm.evaluation import evaluate_heldout, gold_titles
from realm.logging import MetricsLogger, progress, set_num_threads
from realm.marginal import get_loss
from realm.model import RealmModel
from realm.packing import SpecialIds
from realm.retrieval import BlockStore, retrieve
from realm.retriever import Retriever
from realm.run_dir import clean_staging, clear_done, export_retriever, latest_retriever_export, mark_done, retriever_dir
from realm.tracking import (
    accelerator_kwargs,
    init_trackers,
    log_retrieval_table,
    resolve_run_name,
    retrieval_rows,
)
from realm.vocab import load_tokenizer
from trainer.checkpoint import load_checkpoint, resolve_resume, save_checkpoint
from trainer.config import PretrainConfig
from trainer.data import prepared_sentences, pretrain_loader
from trainer.index_watcher import IndexWatcher
from trainer.optim import build_optimizer
from trainer.refresh import builder_command
from trainer.step import LOSS_UNITS, StepOutput, batch_counts, train_step

logger = logging.getLogger(__name__)


@dataclass
class RunTotals:
    """Running totals kept in checkpoints so a resumed run reports whole-run figures."""

    wall_s: float = 0.0
    index_wait_s: float = 0.0
    """All time blocked on the index: the first one and refreshes past ``max_staleness``."""
    refresh_wait_s: float = 0.0
    """The part of ``index_wait_s`` spent on refreshes (everything after the first index of an invocation)."""
    num_index_refreshes: int = 0
    num_exports: int = 0


def build_model(cfg: PretrainConfig, vocab_size: int) -> RealmModel:
    """Fresh model from the config shape, with optional weights-only warm starts (ICT retriever, BERT encoder)."""
    bert_config = cfg.model.bert_config(vocab_size)
    if cfg.model.init_from:
        retriever = Retriever.from_bert(cfg.model.init_from, cfg.retriever)
        encoder = KnowledgeAugmentedEncoder.from_pretrained(cfg.model.init_from)
    else:
        retriever = Retriever.from_config(bert_config, cfg.retriever)
        encoder = KnowledgeAugmentedEncoder.from_config(bert_config)
    if cfg.train.init_retriever:
        retriever = Retriever.from_pretrained(cfg.train.init_retriever)
    if cfg.train.init_encoder:
        encoder = KnowledgeAugmentedEncoder.from_pretrained(cfg.train.init_encoder)
    return RealmModel(retriever, encoder)


@dataclass
class WindowStats:
    """What a log window accumulates: ``metric x count`` sums and counts (tensors, so no host sync per step)."""

    sums: dict[str, torch.Tensor] = field(default_factory=dict)
    counts: dict[str, torch.Tensor] = field(default_factory=dict)
    num_steps: int = 0
    retrieve_s: float = 0.0

    def add(self, out: StepOutput) -> None:
        for name, value in out.metrics.items():
            count = out.counts[name].float()
            self.sums[name] = self.sums.get(name, 0.0) + value.float() * count
            self.counts[name] = self.counts.get(name, 0.0) + count


class Trainer:
    def __init__(self, cfg: PretrainConfig, accelerator: Accelerator | None = None) -> None:
        self.cfg = cfg
        self.run_dir = Path(cfg.train.run_dir)
        self.accelerator = accelerator or Accelerator(**accelerator_kwargs(cfg.tracking, self.run_dir))
        set_num_threads(cfg.train.num_threads)
        torch.manual_seed(cfg.train.seed)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.accelerator.is_main_process:
            save_config(cfg, self.run_dir / "config.yaml")

        self.tokenizer = load_tokenizer(cfg.data.tokenizer)
        self.special = SpecialIds.of(self.tokenizer)
        self.store = BlockStore(load_blocks(cfg.data.blocks))
        cache = Path(cfg.data.cache_dir or self.run_dir / "data")
        with self.accelerator.main_process_first():
            self.sentences = prepared_sentences(
                cfg.data.sentences, self.tokenizer, cfg.data.tagging, cfg.retriever.max_query_length, cache
            )
            self.heldout = (
                prepared_sentences(cfg.data.heldout, self.tokenizer, None, cfg.retriever.max_query_length, cache)
                if cfg.data.heldout
                else None
            )
        # note: read once; every periodic evaluation uses the same gold articles
        self.heldout_titles = gold_titles(cfg.data.heldout) if cfg.data.heldout else None

        model = build_model(cfg, len(self.tokenizer))
        optimizer, self.scheduler = build_optimizer(model, cfg.optim, cfg.train.max_steps)
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)
        # note: the scheduler is not prepared: accelerate's wrapper steps it once per process per call (it assumes a
        # schedule counted in per-process batches), which runs warm-up and decay N times too fast with N processes.
        # Ours counts optimizer steps, so it steps once per step and a run resumes the same on any number of them.
        self.accelerator.register_for_checkpointing(self.scheduler)
        self.num_processes = self.accelerator.num_processes
        self.global_batch_size = cfg.train.batch_size * self.num_processes * cfg.train.grad_accum_steps
        self.loss_fn = get_loss(cfg.train.loss)
        self.schedule = cfg.refresh.schedule()
        self.totals = RunTotals()
        self.step = 0
        self.index = None
        resume = resolve_resume(self.run_dir, cfg.train.resume)
        if resume is not None:
            state = load_checkpoint(self.accelerator, resume)
            self.step = state["step"]
            self.totals = RunTotals(**state.get("totals", {}))
        self.metrics = MetricsLogger(
            self.run_dir / "metrics.jsonl" if self.accelerator.is_main_process else None, self.accelerator
        )
        init_trackers(self.accelerator, cfg.tracking, self.run_dir, to_dict(cfg))
        self.watcher = IndexWatcher(self.run_dir, cfg.refresh.poll_interval_s)
        self.pending = None
        """A version this process's watcher loaded, newer than ``self.index``, not yet agreed on by all processes."""
        self.builder: subprocess.Popen | None = None
        self._start_wall, self._wall_before = time.perf_counter(), self.totals.wall_s  # reset by run()

    @property
    def unwrapped(self) -> RealmModel:
        return self.accelerator.unwrap_model(self.model)

    # ------------------------------------------------------------------------------------------- index side

    def export_retriever(self) -> None:
        """Publishes the current document embedder for the builder (main process only)."""
        if self.accelerator.is_main_process:
            export_retriever(
                self.run_dir,
                self.step,
                self.unwrapped.retriever,
                blocks_path=str(Path(self.cfg.data.blocks).resolve()),
                tokenizer_path=(
                    str(Path(self.cfg.data.tokenizer).resolve())
                    if Path(self.cfg.data.tokenizer).exists()
                    else self.cfg.data.tokenizer
                ),
                max_block_length=self.cfg.retriever.max_block_length,
            )
            self.totals.num_exports += 1

    def start_builder(self) -> None:
        """The single-machine mode: the builder as a child process sharing this run directory (main process only;
        with ``builder_num_processes`` > 1, a torchrun of N builder processes in a process group of their own)."""
        if not (self.cfg.refresh.spawn_builder and self.accelerator.is_main_process):
            return
        log = open(self.run_dir / "builder.log", "a")
        cmd, env = builder_command(self.cfg.refresh, self.run_dir, self._builder_tracking_args())
        self.builder = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        logger.info(
            "started index builder (pid %d, %d process(es)%s), log in %s",
            self.builder.pid,
            self.cfg.refresh.builder_num_processes,
            f" on GPU(s) {self.cfg.refresh.builder_devices}" if self.cfg.refresh.builder_devices else "",
            self.run_dir / "builder.log",
        )

    def _builder_tracking_args(self) -> list[str]:
        """The child builder joins this run's W&B group."""
        t = self.cfg.tracking
        return [
            f"--tracking.report_to={t.report_to}",
            f"--tracking.project={t.project}",
            f"--tracking.run_name={resolve_run_name(t, self.run_dir)}",
            f"--tracking.wandb_mode={t.wandb_mode}",
        ]

    def _gather_ints(self, *values: int) -> torch.Tensor:
        """[num_processes, len(values)]: every process's ``values`` in rank order (one all-gather; none when alone)."""
        local = torch.tensor([values], dtype=torch.long)
        if self.num_processes == 1:
            return local
        return self.accelerator.gather(local.to(self.accelerator.device)).cpu()

    def _take_loaded(self, published=None) -> int:
        """Keeps the newest version the watcher has loaded as ``pending``; returns its step (-1: none pending)."""
        published = published if published is not None else self.watcher.take()
        newest = max(self.pending.step if self.pending else -1, self.index.step if self.index else -1)
        if published is not None and published.step > newest:
            self.pending = published
        return self.pending.step if self.pending is not None else -1

    def _swap_if_agreed(self, held: torch.Tensor, min_step: int = 0) -> bool:
        """Swaps ``pending`` in when every process holds the same version of step >= ``min_step`` ([N] ``held``)."""
        step = int(held[0])
        if step < max(min_step, 0) or not bool((held == step).all()):
            return False
        published, self.pending = self.pending, None
        if published.step > self.step:
            logger.warning(
                "index v%d was built from weights after this run's step %d (a run resumed from an "
                "earlier checkpoint); it is used until the next refresh",
                published.step,
                self.step,
            )
        self.index = published
        self.totals.num_index_refreshes += 1
        logger.info(
            "step %d: swapped in index v%d (staleness %d)", self.step, published.step, self.step - published.step
        )
        return True

    def _wait_problem(self, timed_out: bool) -> int:
        """0: keep waiting; 1: the child builder has exited (even cleanly, it will publish nothing more); 2: timeout."""
        if self.builder is not None and self.builder.poll() is not None:
            return 1
        return 2 if timed_out else 0

    def wait_for_index(self, min_step: int, timeout_s: float) -> float:
        """Blocks until every process has loaded one same version of step >= ``min_step``, swaps it in, and returns
        the seconds waited (also added to ``totals.index_wait_s``).

        Collective: in each round (at most about a second) every process reports the version it holds and whether
        it gives up, so all of them leave in the same round, swapping the same version or raising the same error.
        A process ahead of the others (it has already seen a newer version) makes them wait for that one.
        """
        start = time.perf_counter()
        want = min_step
        while True:
            held = self._take_loaded()
            if held < want:
                held = self._take_loaded(self.watcher.wait_for(want, timeout_s=1.0))
            # note: a process that holds what it needs does not give up, e.g. on a builder that published it and exited
            problem = self._wait_problem(time.perf_counter() - start > timeout_s) if held < want else 0
            rows = self._gather_ints(held, problem)
            problem = int(rows[:, 1].max())
            if problem == 1:
                code = self.builder.returncode if self.builder is not None else "?"
                raise RuntimeError(
                    f"the index builder exited with code {code} while the trainer waits for an index; "
                    f"see {self.run_dir / 'builder.log'}"
                )
            if problem == 2:
                raise TimeoutError(
                    f"no index of step >= {min_step} appeared in {self.run_dir / 'index'} "
                    f"within {timeout_s:.0f} s; is the builder running?"
                )
            if self._swap_if_agreed(rows[:, 0], min_step):
                break
            want = max(min_step, int(rows[:, 0].max()))
        waited = time.perf_counter() - start
        self.totals.index_wait_s += waited
        return waited

    def maybe_swap_index(self) -> None:
        """Between steps: swap in a newer index once every process has it; block only past ``max_staleness``."""
        self._swap_if_agreed(self._gather_ints(self._take_loaded())[:, 0])
        staleness = self.step - self.index.step
        if staleness > self.cfg.refresh.max_staleness:
            # note: every process takes this branch together (same step, same index); the target is the main
            # process's view, since it writes the exports and may have just published one the others cannot see yet
            latest = latest_retriever_export(self.run_dir) if self.accelerator.is_main_process else None
            target = int(self._gather_ints(latest[0] if latest else self.step)[0, 0])
            if target > self.index.step:
                logger.info(
                    "index is %d steps stale (> %d): waiting for v%d", staleness, self.cfg.refresh.max_staleness, target
                )
                self.totals.refresh_wait_s += self.wait_for_index(target, self.cfg.refresh.initial_index_timeout_s)

    # ------------------------------------------------------------------------------------------- loop

    def run(self) -> dict:
        cfg = self.cfg
        self._start_wall, self._wall_before = time.perf_counter(), self.totals.wall_s
        if self.accelerator.is_main_process:
            clear_done(self.run_dir)
            clean_staging(retriever_dir(self.run_dir))  # exports a crashed trainer left half-written
        # note: a resumed run keeps the exports it made on schedule (re-exporting at the resume step would give it
        # an index the uninterrupted run never had); only a fresh run needs its initial export.
        if latest_retriever_export(self.run_dir) is None:
            self.export_retriever()
        self.start_builder()
        self.watcher.start()
        logger.info(
            "training on %d process(es) x batch %d x %d micro-batch(es) = global batch %d (%s, mixed precision %s)",
            self.num_processes,
            cfg.train.batch_size,
            cfg.train.grad_accum_steps,
            self.global_batch_size,
            self.accelerator.distributed_type,
            self.accelerator.mixed_precision,
        )
        self.wait_for_index(0, cfg.refresh.initial_index_timeout_s)

        loader = pretrain_loader(
            self.sentences,
            self.special,
            cfg.data,
            max_query_length=cfg.retriever.max_query_length,
            batch_size=cfg.train.batch_size,
            seed=cfg.train.seed,
            start_step=self.step,
            rank=self.accelerator.process_index,
            world_size=self.num_processes,
            accum_steps=cfg.train.grad_accum_steps,
        )
        micro_batches = iter(loader)
        window = WindowStats()
        t_window = time.perf_counter()
        last_step = min(cfg.train.max_steps, cfg.train.stop_at_step or cfg.train.max_steps)
        bar = progress(last_step, "training", unit="step", initial=self.step, enabled=self.accelerator.is_main_process)
        while self.step < last_step:
            self.maybe_swap_index()
            batch, out = self.optimizer_step(list(itertools.islice(micro_batches, cfg.train.grad_accum_steps)), window)
            self.step += 1
            bar.update(1)

            if self.schedule.is_due(self.step):
                self.export_retriever()
            if self.step % cfg.train.log_interval == 0 or self.step == last_step:
                self.log_window(window, time.perf_counter() - t_window)
                window, t_window = WindowStats(), time.perf_counter()
            if cfg.tracking.is_inspect_due(self.step) and self.accelerator.is_main_process:
                self.log_retrievals(batch, out.output)
            if cfg.train.eval_interval and self.step % cfg.train.eval_interval == 0:
                self.evaluate()
            if self.step % cfg.train.save_interval == 0 or self.step == last_step:
                self.totals.wall_s = self._wall_now()
                self.save()
        bar.close()
        self.totals.wall_s = self._wall_now()
        return self.summary()

    def _wall_now(self) -> float:
        """Wall seconds of the whole run so far, earlier invocations of a resumed run included."""
        return self._wall_before + time.perf_counter() - self._start_wall

    def optimizer_step(self, micro_batches: list[RealmBatch], window: WindowStats) -> tuple[RealmBatch, StepOutput]:
        """Retrieval, forward and backward for each of this process's micro-batches, then one optimizer step.

        Each micro-batch's mean loss is weighted by its share of the units (masked tokens for the REALM loss) of the
        whole global batch, times the number of processes since DDP averages gradients over them. The accumulated
        gradient is then exactly that of the global batch's mean loss: N processes x A micro-batches step like one
        process with the whole batch, even when masks differ in length or the collator rejected examples.
        Returns the last micro-batch and its ``StepOutput`` (for retrieval tables).
        """
        unit = LOSS_UNITS[self.cfg.train.loss]
        local = torch.stack([batch_counts(b)[unit] for b in micro_batches]).float()
        total = local.sum()
        if self.num_processes > 1:
            total = self.accelerator.reduce(total.to(self.accelerator.device), reduction="sum").cpu()
        weights = local * self.num_processes / total.clamp_min(1.0)
        for i, batch in enumerate(micro_batches):
            t0 = time.perf_counter()
            batch = self.attach_candidates(batch.to(self.accelerator.device))
            window.retrieve_s += time.perf_counter() - t0
            # note: accelerate's accumulate() would divide each loss by the number of micro-batches; the weights above
            # already normalise by the global count, so only the all-reduce is deferred to the last micro-batch
            last = i == len(micro_batches) - 1
            with contextlib.nullcontext() if last else self.accelerator.no_sync(self.model):
                out = train_step(self.model, batch, self.loss_fn, unit)
                self.accelerator.backward(out.loss * weights[i].item())
            window.add(out)
        if self.cfg.optim.max_grad_norm > 0:
            self.accelerator.clip_grad_norm_(self.model.parameters(), self.cfg.optim.max_grad_norm)
        self.optimizer.step()
        if not self.accelerator.optimizer_step_was_skipped:  # note: fp16 skips steps whose gradients overflowed
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        window.num_steps += 1
        return batch, out

    def attach_candidates(self, batch: RealmBatch) -> RealmBatch:
        """Attaches this process's K candidates per query, searched with the live query embedder (no dropout)."""
        self.model.eval()
        with torch.no_grad(), self.accelerator.autocast():
            query_emb = self.unwrapped.embed_queries(batch)
        self.model.train()
        return retrieve(query_emb, batch, self.index, self.store, self.special, self.cfg.retriever).to(
            self.accelerator.device
        )

    def log_window(self, window: WindowStats, seconds: float) -> None:
        """Metrics of the window: sums and counts reduced over processes, then one mean each, logged once."""
        keys = sorted(window.sums)
        stacked = torch.stack(
            [torch.stack([window.sums[k] for k in keys]), torch.stack([window.counts[k] for k in keys])]
        )
        if self.num_processes > 1:
            stacked = self.accelerator.reduce(stacked.to(self.accelerator.device), reduction="sum")
        means = (stacked[0] / stacked[1].clamp_min(1.0)).tolist()
        metrics = {f"train/{k}": v for k, v in zip(keys, means)}
        wall = self._wall_now()
        metrics.update(
            {
                "train/lr": self.scheduler.get_last_lr()[0],
                "index/version": self.index.step,
                "index/staleness": max(self.step - self.index.step, 0),
                "index/num_refreshes": self.totals.num_index_refreshes,
                "time/step_s": seconds / window.num_steps,
                "time/retrieve_s": window.retrieve_s / window.num_steps,
                "time/index_wait_s": self.totals.index_wait_s,
                "time/index_wait_fraction": self.totals.index_wait_s / wall if wall else 0.0,
                "time/refresh_wait_fraction": self.totals.refresh_wait_s / wall if wall else 0.0,
                "train/world_size": self.num_processes,
            }
        )
        plain = self.metrics.log(metrics, self.step)
        logger.info(
            "step %d loss %.4f acc %.3f utility %.3f null %.3f index v%d (stale %d) %.3f s/step",
            self.step,
            plain["train/loss"],
            plain["train/mlm_accuracy"],
            plain["train/retrieval_utility"],
            plain["train/null_doc_prob"],
            self.index.step,
            self.step - self.index.step,
            plain["time/step_s"],
        )

    def log_retrievals(self, batch, output) -> None:
        """A table of what each sampled query retrieved, p(z|x), p(y|z,x) (W&B and RUN/retrievals.jsonl)."""
        rows = retrieval_rows(
            batch,
            output,
            self.store,
            self.tokenizer,
            index_version=self.index.step,
            staleness=max(self.step - self.index.step, 0),
            step=self.step,
            max_rows=self.cfg.tracking.num_inspect_rows,
        )
        log_retrieval_table(self.accelerator, rows, self.step, self.run_dir)

    def evaluate(self) -> dict:
        """Held-out evaluation on the live index (main process; small by construction)."""
        if self.heldout is None or not self.accelerator.is_main_process:
            return {}
        result = evaluate_heldout(
            self.unwrapped,
            self.heldout,
            self.store,
            self.special,
            self.cfg.retriever,
            index=self.index,
            batch_size=self.cfg.eval.batch_size,
            max_examples=self.cfg.eval.max_examples,
            gold_titles=self.heldout_titles,
        ).as_dict()
        self.metrics.log(result, self.step)
        return result

    def save(self) -> None:
        state = {"index_step": self.index.step if self.index else None, "totals": vars(self.totals)}
        save_checkpoint(self.accelerator, self.run_dir, self.step, state, self.cfg, self.cfg.train.keep_checkpoints)

    def summary(self) -> dict:
        totals = self.totals
        return {
            "step": self.step,
            "world_size": self.num_processes,
            "global_batch_size": self.global_batch_size,
            "wall_seconds": totals.wall_s,
            "num_index_refreshes": totals.num_index_refreshes,
            "trainer_wait_fraction": totals.index_wait_s / totals.wall_s if totals.wall_s else 0.0,
            "refresh_wait_fraction": totals.refresh_wait_s / totals.wall_s if totals.wall_s else 0.0,
            "index_wait_seconds": totals.index_wait_s,
            "final_index_version": self.index.step if self.index else None,
            "num_retriever_exports": totals.num_exports,
        }

    def close(self) -> None:
        """Stops the watcher and the child builder; marks the run done so a standalone builder exits."""
        self.watcher.close()
        self.metrics.close()
        self.accelerator.end_training()  # finishes trackers (writes the offline W&B run)
        if self.accelerator.is_main_process:
            mark_done(self.run_dir)
        if self.builder is not None and self.builder.poll() is None:
            self.builder.terminate()
            try:
                self.builder.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.builder.kill()
