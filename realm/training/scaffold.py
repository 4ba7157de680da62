"""The training scaffold every training job shares: reader warm-up, ICT, REALM pre-training and QA fine-tuning.

A job builds its model, optimizer, scheduler and data, then hands them to ``TrainingLoop``, which owns what must be
the same everywhere: the optimizer step (clipping, a scheduler stepped once per optimizer step, fp16 skips honoured),
the metrics window (``metric x count`` sums reduced over processes, then one mean each), logging to
``RUN/metrics.jsonl`` and the trackers, and checkpoints in ``RUN/checkpoints/step-N`` published by rename with
``resume`` from the newest complete one. Batch orders are functions of (seed, step) (``realm.training.sampler``), so a
resumed job continues exactly where an uninterrupted one would be. A job whose loss or weights stop being finite is
stopped before anything of that step is saved (``NonFiniteLossError``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable, Iterator, Mapping

import torch
from accelerate import Accelerator
from accelerate.utils import broadcast_object_list

from realm.core.checks import Problems
from realm.core.config import save_config
from realm.core.errors import RunError, UserError
from realm.core.logging import MetricsLogger, cut_log, set_num_threads
from realm.core.precision import check_precision
from realm.run.layout import CONFIG_FILE, METRICS_FILE, TRAINER_LOCK, checkpoints_dir
from realm.run.paths import prepare_job_config, recorded_run_dir
from realm.run.publication import RunInUseError, clean_staging, exclusive_lock, replace_published
from realm.training.accelerator import use_fast_kernels
from realm.training.checkpoint import load_checkpoint, load_rank_tensors, resolve_resume, save_checkpoint
from realm.training.compilation import compile_backbones
from realm.training.optim import OptimConfig, build_optimizer

logger = logging.getLogger(__name__)
LOG_SIZES = "log_sizes"
"""Key of the checkpoint state: ``{log name: bytes}`` of the run's append-only logs when it was saved."""
LOSS = "loss"
"""The window metric every job adds its loss under; the loop stops the job when it is not finite."""
DIVERGED_HINT = ("lower optim.lr or lengthen optim.warmup_steps, and start again in a new train.run_dir (or resume "
                 "from a checkpoint saved before the loss grew)")


class NonFiniteLossError(UserError, FloatingPointError):
    """A job's loss or weights stopped being finite; the message names the step, and nothing of it was saved."""


@dataclass(kw_only=True, slots=True)
class LoopConfig:
    """The ``train`` section of every training job: where it writes, how long, and how it checkpoints and resumes."""

    run_dir: str = "runs/job"
    """The job's output folder: ``config.yaml``, ``metrics.jsonl``, ``checkpoints/`` and what the job publishes."""
    max_steps: int = 1000
    batch_size: int = 32
    seed: int = 0
    log_interval: int = 20
    save_interval: int = 1000
    """Steps between checkpoints (one is always written at the last step of an invocation)."""
    keep_checkpoints: int = 2
    stop_at_step: int = 0
    """End this invocation at this step with a checkpoint, as a pre-empted job would (0: run to max_steps); the
    learning-rate schedule still targets ``max_steps``, so a resumed run continues exactly."""
    resume: str = "auto"
    """``auto``: newest complete checkpoint in run_dir if any; ``never``; or a checkpoint folder."""
    num_threads: int = 0
    """Intra-op threads (0: torch's default)."""
    precision: str = "auto"
    """``fp32``, ``bf16`` (autocast over fp32 master weights and optimizer state), ``fp16`` (GPUs only) or ``auto``:
    bf16 on a GPU with bf16, fp32 elsewhere, CPUs included (bf16 training on a CPU with AMX or AVX-512 BF16 is asked
    for with ``bf16``: experiments/demo/log/2026-11-28-precision.md); ``realm.core.precision``. Decides over the
    launcher's ``--mixed_precision`` (``auto`` takes its explicit bf16 or fp16)."""
    compile: bool = False
    """Compile the model's BERTs with ``torch.compile`` (inductor, dynamic shapes; ``realm.training.compilation``):
    a 1.1-1.26x faster step at the demo shape (docs/performance.md), paid for by a first compile of tens of seconds to
    minutes per job and mode on 2 cores, so it pays on long runs only. Losses match eager to rounding, not bit for bit
    (fused kernels sum in another order; dropout > 0 draws other masks); weights and checkpoints are the eager model's.
    Needs a C++ compiler on CPU (a one-line ``ConfigError`` without one)."""

    MIN_STEPS: ClassVar[int] = 0
    """The fewest ``max_steps`` a job accepts (a job that must take a step sets 1)."""

    def __post_init__(self) -> None:
        problems = Problems()
        if self.max_steps < self.MIN_STEPS:
            problems.add(f"max_steps must be >= {self.MIN_STEPS}, got {self.max_steps}")
        if self.batch_size <= 0:
            problems.add(f"batch_size must be positive, got {self.batch_size}")
        if min(self.log_interval, self.save_interval, self.keep_checkpoints) <= 0:
            problems.add("log_interval, save_interval and keep_checkpoints must be positive")
        if self.stop_at_step < 0:
            problems.add(f"stop_at_step must be >= 0, got {self.stop_at_step}")
        if not self.run_dir:
            problems.add("run_dir must be set")
        problems.check(check_precision, self.precision)
        problems.raise_if_any()

    @property
    def last_step(self) -> int:
        """The step this invocation ends at."""
        return min(self.max_steps, self.stop_at_step or self.max_steps)


@dataclass
class MetricWindow:
    """What a log window accumulates: ``metric x count`` sums and counts (tensors, so no host sync per step)."""

    sums: dict[str, torch.Tensor] = field(default_factory=dict)
    counts: dict[str, torch.Tensor] = field(default_factory=dict)
    num_steps: int = 0

    def add(self, metrics: Mapping[str, torch.Tensor], counts: Mapping[str, torch.Tensor] | None = None) -> None:
        """Adds one micro-batch's means, each weighted by its count (1 when ``counts`` has none for it)."""
        for name, value in metrics.items():
            value = torch.as_tensor(value).detach().float()
            count = torch.as_tensor(counts[name] if counts and name in counts else 1.0).float().to(value.device)
            self.sums[name] = self.sums.get(name, 0.0) + value * count
            self.counts[name] = self.counts.get(name, 0.0) + count

    def means(self, accelerator: Accelerator) -> dict[str, float]:
        """The count-weighted mean of each metric over the window and every process (one all-reduce)."""
        keys = sorted(self.sums)
        if not keys:
            return {}
        stacked = torch.stack([torch.stack([self.sums[k] for k in keys]), torch.stack([self.counts[k] for k in keys])])
        if accelerator.num_processes > 1:
            stacked = accelerator.reduce(stacked.to(accelerator.device), reduction="sum")
        return dict(zip(keys, (stacked[0] / stacked[1].clamp_min(1.0)).tolist()))


class TrainingLoop:
    """Step, window, log and checkpoint for one job; ``step`` is the number of optimizer steps taken so far."""

    def __init__(
        self,
        accelerator: Accelerator,
        loop: LoopConfig,
        optim: OptimConfig,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: Any,
        config: Any,
    ) -> None:
        self.accelerator, self.cfg, self.optim = accelerator, loop, optim
        self.model, self.optimizer, self.scheduler, self.config = model, optimizer, scheduler, config
        self.run_dir, self.step = Path(loop.run_dir), 0
        self.rank_tensors: dict[str, torch.Tensor] = {}
        """This process's own tensors in the checkpoint ``resume`` restored ({} when none)."""
        self.window = MetricWindow()
        self.metrics = MetricsLogger(self.run_dir / METRICS_FILE if accelerator.is_main_process else None, accelerator)
        self.appended_logs = [METRICS_FILE]
        """The run's append-only logs (names in ``run_dir``): each checkpoint records their sizes and a resumed job
        cuts them back to those sizes (a fresh start: to nothing), so nothing is logged twice. A job adds its own
        before ``resume``."""
        self.nonfinite_step: torch.Tensor | None = None
        """The first step whose loss was not finite (0: none yet), kept on the device (``check_finite``)."""

    @classmethod
    def prepare(cls, accelerator: Accelerator, loop: LoopConfig, optim: OptimConfig, model: torch.nn.Module,
                config: Any, max_length: int = 0) -> "TrainingLoop":  # fmt: skip
        """The loop for ``model``: its optimizer and schedule (over ``loop.max_steps``), prepared with accelerate, and
        the attention kernel for its precision and longest sequence (``max_length`` wordpieces; 0: unknown)."""
        # note: transformers' from_pretrained returns a model in eval mode and a model built from a config is in train
        # mode, so without this dropout would depend on how the start was loaded (it did: QA rows from a BERT folder
        # trained without it, the row from a pre-training run with it); evaluations restore the mode they found
        model.train()
        optimizer, scheduler = build_optimizer(model, optim, max(loop.max_steps, 1))
        # note: the scheduler is not prepared: accelerate's wrapper steps it once per process per call (it assumes a
        # schedule counted in per-process batches), which runs warm-up and decay N times too fast with N processes
        model, optimizer = accelerator.prepare(model, optimizer)
        use_fast_kernels(model, accelerator, max_length)
        if loop.compile:
            compile_backbones(model, accelerator.device.type)
        return cls(accelerator, loop, optim, model, optimizer, scheduler, config)

    def resume(self) -> dict[str, Any]:
        """Restores the newest complete checkpoint (per ``resume``); returns its saved state ({} when none)."""
        def resolve_on_main() -> Path | None:
            # note: a kill mid-checkpoint or mid-prune leaves staging folders that no reader ever looks at
            for leftover in clean_staging(checkpoints_dir(self.run_dir)):
                logger.warning("removed %s, left by a killed run", leftover)
            # note: newer checkpoints that fail verification are set aside first, so the others resolve the same one
            return resolve_resume(self.run_dir, self.cfg.resume, set_aside_rejected=True)

        # note: a run the main process cannot resume (no checkpoint verifies) ends every rank with its one line
        # (its broadcast is also the barrier: the others resolve only after the main process has set checkpoints aside)
        path = on_main_first(self.accelerator, resolve_on_main, RunError)
        if not self.accelerator.is_main_process:
            path = resolve_resume(self.run_dir, self.cfg.resume)
        state = {} if path is None else load_checkpoint(self.accelerator, path, self.scheduler)
        self.rank_tensors = {} if path is None else load_rank_tensors(path, self.accelerator.process_index)
        self.step = int(state.get("step", 0))
        if self.accelerator.is_main_process:
            self._cut_logs(state)
        return state

    def _cut_logs(self, state: Mapping[str, Any]) -> None:
        """What a killed run appended after the checkpoint (with none, everything: a run killed before its first
        checkpoint) is removed from every appended log, since this run appends it again."""
        if state and LOG_SIZES not in state:  # a checkpoint that predates LOG_SIZES: the records of later steps
            self.metrics.drop_after(self.step)
            return
        sizes = state.get(LOG_SIZES, {})
        for name in self.appended_logs:
            cut_log(self.run_dir / name, int(sizes.get(name, 0)))

    @property
    def done(self) -> bool:
        return self.step >= self.cfg.last_step

    def optimizer_step(self) -> None:
        """Clips, steps the optimizer and the scheduler, zeroes the gradients; call after the backward pass(es)."""
        if self.optim.max_grad_norm > 0:
            self.accelerator.clip_grad_norm_(self.model.parameters(), self.optim.max_grad_norm)
        self.optimizer.step()
        # note: the scheduler is never prepared by accelerate (a prepared one steps once per process per call, N times
        # too fast); ours counts optimizer steps, and fp16 skips the steps whose gradients overflowed
        if not self.accelerator.optimizer_step_was_skipped:
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.window.num_steps += 1
        loss = self.window.sums.get(LOSS)
        if loss is not None:
            # note: noted on the device and not read here, since a check on the host would sync every step; the
            # window's sum stays non-finite from the bad step on, and check_finite reads this where the loop syncs
            first = self.nonfinite_step if self.nonfinite_step is not None else torch.zeros_like(loss, dtype=torch.long)
            self.nonfinite_step = torch.where((first == 0) & ~torch.isfinite(loss), self.step, first)

    def check_finite(self, weights: bool = True) -> None:
        """Raises ``NonFiniteLossError`` if the loss of a step so far was not finite or (``weights``) a weight is not.

        Called by every process (one gather) when a window is logged (the loop reads values on the host then anyway)
        and before anything is saved or exported, so a diverged job stops before it writes anything of the bad step.
        The weights are checked as well since a finite loss can still leave them non-finite: a NaN gradient (clipping
        does not stop it: the NaN norm scales every gradient to NaN) or an infinite learning rate.
        """
        device = self.accelerator.device
        first = self.nonfinite_step if self.nonfinite_step is not None else torch.zeros((), dtype=torch.long)
        bad_weights = (~torch.stack([torch.isfinite(p.detach()).all() for p in self.model.parameters()]).all()
                       if weights else torch.zeros((), dtype=torch.bool))  # fmt: skip
        flags = torch.stack([first.to(device), bad_weights.to(device).long()])[None]
        rows = (self.accelerator.gather(flags) if self.accelerator.num_processes > 1 else flags).tolist()
        steps = [step for step, _ in rows if step > 0]
        if steps:
            loss = float(self.window.sums.get(LOSS, math.nan))  # note: the window still holds the bad step
            value = loss if not math.isfinite(loss) else "nan or inf, on another process"
            raise NonFiniteLossError(f"non-finite loss ({value}) at step {min(steps)}; nothing from this step was "
                                     f"saved; {DIVERGED_HINT}")  # fmt: skip
        if any(bad for _, bad in rows):
            raise NonFiniteLossError(f"non-finite weights after step {self.step} (its loss was finite: a NaN gradient "
                                     f"or an infinite learning rate); nothing from this step was saved; "
                                     f"{DIVERGED_HINT}")  # fmt: skip

    def log_due(self) -> bool:
        return self.step % self.cfg.log_interval == 0 or self.step == self.cfg.last_step

    def save_due(self) -> bool:
        return self.step % self.cfg.save_interval == 0 or self.step == self.cfg.last_step

    def eval_due(self, interval: int) -> bool:
        """Every ``interval`` steps from step 0 (0: never); unlike a log or a save, not forced at the last step."""
        return interval > 0 and self.step % interval == 0

    def log_window(self, prefix: str, extra: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], int]:
        """Logs the window's means as ``prefix/name`` plus ``extra`` at the current step, then starts a new window.
        Returns the logged values and the number of steps the window held."""
        self.check_finite(weights=False)
        means = {f"{prefix}/{k}": v for k, v in self.window.means(self.accelerator).items()}
        num_steps = self.window.num_steps
        plain = self.metrics.log({**means, **(extra or {})}, self.step)
        self.window = MetricWindow()
        return plain, num_steps

    def end_step(self, prefix: str, extra: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """After an optimizer step: logs the window when due (returns what was logged, else None), then checkpoints
        when due."""
        plain = self.log_window(prefix, extra)[0] if self.log_due() else None
        if self.save_due():
            self.save()
        return plain

    def publish(self, final: Path, save: Callable[[Path], None], manifest: Mapping[str, Any]) -> Path:
        """Publishes the job's output (what ``save(folder)`` writes) as ``final`` once the job has run all its steps
        (main process; every process waits); an invocation stopped early publishes nothing."""
        if self.step >= self.cfg.max_steps:
            self.check_finite()
            if self.accelerator.is_main_process:
                replace_published(final, save, {**manifest, "steps": self.step})
            self.accelerator.wait_for_everyone()
        return final

    def save(self, state: Mapping[str, Any] | None = None, rank_tensors: Mapping[str, torch.Tensor] | None = None
             ) -> Path:  # fmt: skip
        """Checkpoint of the current step (every process must call it, each with its own ``rank_tensors``)."""
        self.check_finite()
        sizes = {name: (self.run_dir / name).stat().st_size if (self.run_dir / name).is_file() else 0
                 for name in self.appended_logs}  # fmt: skip
        state = {**(state or {}), LOG_SIZES: sizes}
        return save_checkpoint(self.accelerator, self.run_dir, self.step, state, self.config, self.cfg.keep_checkpoints,
                               self.scheduler, dict(rank_tensors or {}))  # fmt: skip

    def close(self) -> None:
        self.metrics.close()


def start_job(loop: LoopConfig, accelerator: Accelerator, config: Any) -> Path:
    """What every job does first: threads, seed, its run directory and the resolved ``config.yaml`` in it, whose
    paths are absolute; a run that moved since its ``config.yaml`` was written reads its paths where they are now
    (``realm.run.paths.prepare_job_config``: ``config`` is changed in place, before the job reads any input)."""
    set_num_threads(loop.num_threads)
    torch.manual_seed(loop.seed)
    run_dir = _run_dir(loop.run_dir)
    # note: read on the main process before it writes config.yaml again, and sent to the others, so every process
    # relocates the same way whichever version of the file it would have read
    recorded = recorded_run_dir(run_dir / CONFIG_FILE) if accelerator.is_main_process else None
    if accelerator.num_processes > 1:
        recorded = broadcast_object_list([recorded])[0]
    run_dir.mkdir(parents=True, exist_ok=True)  # note: before the paths are made absolute, train.run_dir among them
    prepare_job_config(config, run_dir, recorded, run_dir / CONFIG_FILE)
    if accelerator.is_main_process:
        save_config(config, run_dir / CONFIG_FILE)
    return run_dir


def _run_dir(run_dir: str | Path) -> Path:
    """``run_dir`` as a path, refused when it names a file."""
    if Path(run_dir).exists() and not Path(run_dir).is_dir():
        raise RunError(f"train.run_dir={run_dir} is a file, not a run directory")
    return Path(run_dir)


@contextlib.contextmanager
def hold_run_dir(run_dir: str | Path, accelerator: Accelerator) -> Iterator[None]:
    """One trainer per run directory: the main process holds ``RUN/.trainer.lock`` while the body runs.

    Enter it before anything in the run directory is written or removed, so that a second trainer is refused (a
    ``RunInUseError`` naming the run and the holder's pid) and the run is left as it was. The lock is an ``flock``,
    which the kernel releases when its holder dies (SIGKILL included), so a run resumed after a kill finds it free.
    The other processes learn whether the main one took it: a refusal, or any failure to take it, ends every rank
    with the same one-line error instead of leaving them waiting at the next collective.
    """
    run_dir = _run_dir(run_dir)
    refusal = f"run directory {run_dir} is in use by another trainer (one per run); stop it first"
    with contextlib.ExitStack() as held:
        on_main_first(accelerator, lambda: held.enter_context(exclusive_lock(run_dir / TRAINER_LOCK, refusal=refusal)),
                      RunInUseError)  # fmt: skip
        yield


def on_main_first(accelerator: Accelerator, work: Callable[[], Any], error_type: type[UserError] = RunError) -> Any:
    """``work()`` on the main process, whose failure every other process hears of: they raise ``error_type`` with
    its message (one line, ``rank 0: ...``) instead of waiting at their next collective for a rank that has gone.
    Returns what ``work`` returned on the main process, None on the others."""
    error: Exception | None = None
    result = None
    if accelerator.is_main_process:
        try:
            result = work()
        except Exception as err:  # noqa: BLE001 - the other processes must hear of any failure, not wait
            error = err
    message = (str(error) or type(error).__name__) if error is not None else ""
    if accelerator.num_processes > 1:
        message = broadcast_object_list([message])[0]
    if error is not None:
        raise error
    if message:
        raise error_type(f"rank 0: {message}")
    return result


def iterate(loader: Iterable) -> Iterator:
    """An iterator over ``loader`` that leaves the global RNG untouched.

    Starting to iterate a ``DataLoader`` draws its base seed from torch's global RNG. A resumed job starts its
    iterator after restoring the RNG state of its checkpoint, an uninterrupted one did not at that step, so without
    the fork every dropout mask after a resume would differ from the uninterrupted run's.
    """
    with torch.random.fork_rng(devices=[]):
        return iter(loader)


@contextlib.contextmanager
def removed_if_setup_fails(run_dir: str | Path, is_main_process: bool) -> Iterator[None]:
    """A job's set-up (``start_job`` and reading its inputs) inside this: when it fails, a run directory that did not
    exist before is removed again, so a mistyped input leaves no half-made run behind (only ``config.yaml`` and data
    caches, which a rerun with the right input would otherwise mistake for a run to resume). A trainer refused the
    run (``hold_run_dir``) leaves it alone: it is the other trainer's, even when that one created it meanwhile."""
    run_dir = Path(run_dir)
    existed = run_dir.exists()
    try:
        yield
    except BaseException as err:
        if not existed and is_main_process and run_dir.is_dir() and not isinstance(err, RunInUseError):
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
