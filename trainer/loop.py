"""The pre-training loop: owns the optimizer step, retriever exports, index swaps, evaluation and checkpoints.

The index is never refreshed inside a step. The builder (another process) publishes new versions; a watcher thread
loads them off the critical path; the loop swaps the newest one in between steps and blocks only when the index it
has is more than ``max_staleness`` steps old (or when it has none yet).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from accelerate import Accelerator

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
from trainer.step import train_step

logger = logging.getLogger(__name__)


@dataclass
class RunTotals:
    """Running totals kept in checkpoints so a resumed run reports whole-run figures."""

    wall_s: float = 0.0
    index_wait_s: float = 0.0
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
        optimizer, scheduler = build_optimizer(model, cfg.optim, cfg.train.max_steps)
        self.model, self.optimizer, self.scheduler = self.accelerator.prepare(model, optimizer, scheduler)
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
        self.builder: subprocess.Popen | None = None

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
        """The single-machine mode: the builder as a child process sharing this run directory."""
        if not (self.cfg.refresh.spawn_builder and self.accelerator.is_main_process):
            return
        log = open(self.run_dir / "builder.log", "a")
        cmd = [
            sys.executable,
            "-m",
            "index_builder.build",
            "--config",
            self.cfg.refresh.builder_config,
            f"--run_dir={self.run_dir}",
            f"--num_threads={self.cfg.refresh.builder_num_threads}",
            *self._builder_tracking_args(),
        ]
        self.builder = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        logger.info("started index builder (pid %d), log in %s", self.builder.pid, self.run_dir / "builder.log")

    def _builder_tracking_args(self) -> list[str]:
        """The child builder joins this run's W&B group."""
        t = self.cfg.tracking
        return [
            f"--tracking.report_to={t.report_to}",
            f"--tracking.project={t.project}",
            f"--tracking.run_name={resolve_run_name(t, self.run_dir)}",
            f"--tracking.wandb_mode={t.wandb_mode}",
        ]

    def _check_builder_alive(self) -> None:
        """Called only while waiting: a child builder that has exited, even cleanly, will publish nothing more."""
        if self.builder is not None and self.builder.poll() is not None:
            raise RuntimeError(
                f"the index builder exited with code {self.builder.returncode} while the trainer waits for an "
                f"index; see {self.run_dir / 'builder.log'}"
            )

    def _swap(self, published) -> None:
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

    def wait_for_index(self, min_step: int, timeout_s: float) -> None:
        """Blocks until an index built from weights of step >= ``min_step`` is loaded; the time counts as waiting."""
        start = time.perf_counter()
        while True:
            self._check_builder_alive()
            published = self.watcher.wait_for(min_step, timeout_s=1.0)
            if published is not None:
                self._swap(published)
                break
            if time.perf_counter() - start > timeout_s:
                raise TimeoutError(
                    f"no index of step >= {min_step} appeared in {self.run_dir / 'index'} "
                    f"within {timeout_s:.0f} s; is the builder running?"
                )
        self.totals.index_wait_s += time.perf_counter() - start

    def maybe_swap_index(self) -> None:
        """Between steps: take a newer index if the watcher has one; block only past ``max_staleness``."""
        published = self.watcher.take()
        if published is not None and (self.index is None or published.step > self.index.step):
            self._swap(published)
        staleness = self.step - self.index.step
        if staleness > self.cfg.refresh.max_staleness:
            latest = latest_retriever_export(self.run_dir)
            target = latest[0] if latest else self.step
            if target > self.index.step:
                logger.info(
                    "index is %d steps stale (> %d): waiting for v%d", staleness, self.cfg.refresh.max_staleness, target
                )
                self.wait_for_index(target, self.cfg.refresh.initial_index_timeout_s)

    # ------------------------------------------------------------------------------------------- loop

    def run(self) -> dict:
        cfg = self.cfg
        start_wall = time.perf_counter()
        wall_before = self.totals.wall_s
        if self.accelerator.is_main_process:
            clear_done(self.run_dir)
            clean_staging(retriever_dir(self.run_dir))  # exports a crashed trainer left half-written
        # note: a resumed run keeps the exports it made on schedule (re-exporting at the resume step would give it
        # an index the uninterrupted run never had); only a fresh run needs its initial export.
        if latest_retriever_export(self.run_dir) is None:
            self.export_retriever()
        self.start_builder()
        self.watcher.start()
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
            world_size=self.accelerator.num_processes,
        )
        window: list[dict] = []
        t_window = time.perf_counter()
        last_step = min(cfg.train.max_steps, cfg.train.stop_at_step or cfg.train.max_steps)
        bar = progress(last_step, "training", unit="step", initial=self.step, enabled=self.accelerator.is_main_process)
        for batch in loader:
            if self.step >= last_step:
                break
            self.maybe_swap_index()
            batch = batch.to(self.accelerator.device)
            t0 = time.perf_counter()
            self.model.eval()  # note: deterministic query embeddings for the search (no dropout)
            with torch.no_grad():
                query_emb = self.unwrapped.embed_queries(batch)
            self.model.train()
            batch = retrieve(
                query_emb,
                batch,
                self.index,
                self.store,
                self.special,
                cfg.retriever,
            ).to(self.accelerator.device)
            retrieve_s = time.perf_counter() - t0
            out = train_step(self.model, batch, self.loss_fn)
            self.accelerator.backward(out.loss)
            if cfg.optim.max_grad_norm > 0:
                self.accelerator.clip_grad_norm_(self.model.parameters(), cfg.optim.max_grad_norm)
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.step += 1
            bar.update(1)
            window.append({**out.metrics, "retrieve_s": retrieve_s})

            if self.schedule.is_due(self.step):
                self.export_retriever()
            if self.step % cfg.train.log_interval == 0 or self.step == last_step:
                self.log_window(window, time.perf_counter() - t_window)
                window, t_window = [], time.perf_counter()
            if cfg.tracking.is_inspect_due(self.step) and self.accelerator.is_main_process:
                self.log_retrievals(batch, out.output)
            if cfg.train.eval_interval and self.step % cfg.train.eval_interval == 0:
                self.evaluate()
            if self.step % cfg.train.save_interval == 0 or self.step == last_step:
                self.totals.wall_s = wall_before + time.perf_counter() - start_wall
                self.save()
        bar.close()
        self.totals.wall_s = wall_before + time.perf_counter() - start_wall
        return self.summary()

    def log_window(self, window: list[dict], seconds: float) -> None:
        """Averages the window's metrics across steps and processes, then logs them once."""
        keys = [k for k in window[0] if k != "retrieve_s"]
        stacked = torch.stack([torch.stack([w[k].float() for k in keys]) for w in window]).mean(0)
        stacked = self.accelerator.reduce(stacked.to(self.accelerator.device), reduction="mean")
        metrics = {f"train/{k}": v for k, v in zip(keys, stacked.tolist())}
        metrics.update(
            {
                "train/lr": self.scheduler.get_last_lr()[0],
                "index/version": self.index.step,
                "index/staleness": max(self.step - self.index.step, 0),
                "index/num_refreshes": self.totals.num_index_refreshes,
                "time/step_s": seconds / len(window),
                "time/retrieve_s": sum(w["retrieve_s"] for w in window) / len(window),
                "time/index_wait_s": self.totals.index_wait_s,
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
            "wall_seconds": totals.wall_s,
            "num_index_refreshes": totals.num_index_refreshes,
            "trainer_wait_fraction": totals.index_wait_s / totals.wall_s if totals.wall_s else 0.0,
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
