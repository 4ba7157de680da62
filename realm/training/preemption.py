"""Preemption: a SIGTERM or SIGUSR1 ends a training job at the next step boundary, checkpointed, so that a requeued job
resumes exactly where it stopped.

A cluster signals a job before it takes the job's nodes away: SLURM sends ``--signal=B:USR1@SECONDS`` to the batch
shell ahead of the time limit (``launch/slurm/*.sbatch`` forward it to the job step) and SIGTERM on cancellation or
preemption, then SIGKILL once its grace time is over. Without a handler every signalled process dies at once and the
job loses what it did since its last periodic checkpoint (up to ``train.save_interval`` steps).

With ``Preemption`` installed, the handler only records the signal (nothing else is safe inside a handler). The loop
asks ``agreed`` once per optimizer step, after everything of that step is done (exports, logs, evaluation, a periodic
checkpoint): every process takes part in one gather of its flag, the same collective as the non-finite-loss stop
(``TrainingLoop.check_finite``), so one rank that got the signal stops every rank at the same step, whether the
launcher signalled one process or all of them. The loop then saves that step with its own checkpoint code (written under
a temporary name and renamed, so a kill during the save leaves the previous checkpoint newest) and raises
``Preempted``, whose exit code is ``PREEMPTED_EXIT_CODE``.
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType
from typing import TYPE_CHECKING, Any

import torch
from accelerate import Accelerator

if TYPE_CHECKING:
    from realm.training.scaffold import TrainingLoop

logger = logging.getLogger(__name__)

PREEMPTED_EXIT_CODE = 143
"""Exit code of a job stopped by a preemption signal once its checkpoint is written: 128 + SIGTERM, what a shell
reports for a process a SIGTERM ended, so a script that requeues on 143 treats both alike. ``launch/*.sh`` report it
too when the launcher in between loses it (accelerate's launcher exits 1 when a worker fails)."""
PREEMPTION_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGUSR1)
"""SIGTERM: cancellation, preemption, the time limit. SIGUSR1: SLURM's advance warning (``--signal``); torch's elastic
agent forwards it to its workers when it is in ``PET_SIGNALS_TO_HANDLE`` (``launch/common.sh`` puts it there)."""


class Preempted(SystemExit):
    """Raised by a loop once the checkpoint of the step it stopped at is complete.

    A ``SystemExit`` (not an error: nothing went wrong) with code ``PREEMPTED_EXIT_CODE``: entry points let it through,
    their ``finally`` blocks release the run (lock, builder, trackers), and the process ends with that code.
    """

    def __init__(self, step: int, signal_name: str) -> None:
        super().__init__(PREEMPTED_EXIT_CODE)
        self.step = step
        self.signal_name = signal_name

    def __str__(self) -> str:
        return (f"stopped by {self.signal_name} after step {self.step}, checkpointed; the same command resumes "
                f"(exit code {PREEMPTED_EXIT_CODE})")  # fmt: skip


class Preemption:
    """The preemption flag of one job: ``install`` (or ``with``) its handlers, ``agreed`` at every step boundary.

    Handlers can only be installed from the main thread (a job run in another thread keeps the default actions and
    never stops early). The previous handlers are put back by ``restore``.
    """

    def __init__(self, signals: tuple[signal.Signals, ...] = PREEMPTION_SIGNALS) -> None:
        self.signals = signals
        self.received = 0
        """Number of the first preemption signal this process received (0: none)."""
        self._previous: dict[signal.Signals, Any] = {}

    def install(self) -> "Preemption":
        if threading.current_thread() is threading.main_thread():
            for sig in self.signals:
                self._previous[sig] = signal.signal(sig, self._handle)
        else:
            logger.warning("not on the main thread: preemption signals keep their default actions")
        return self

    def restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()

    def __enter__(self) -> "Preemption":
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.restore()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # note: only a flag: the signal may land anywhere (inside a collective, a checkpoint write, logging's lock);
        # a second signal changes nothing, since the step boundary is on its way
        self.received = self.received or signum

    def agreed(self, accelerator: Accelerator) -> int:
        """The signal that stops the job at this step on every process (0: none); call on every process, once per
        step at the same point (with several processes it is a collective: one gather of one number)."""
        flag = torch.tensor([self.received], dtype=torch.long)
        if accelerator.num_processes > 1:
            flag = accelerator.gather(flag.to(accelerator.device))
        received = [value for value in flag.tolist() if value]
        return received[0] if received else 0

    def stop(self, accelerator: Accelerator, step: int, signum: int) -> Preempted:
        """The exception that ends the job once the checkpoint of ``step`` is written (its one line logged on the main
        process)."""
        stop = Preempted(step, signal.Signals(signum).name)
        if accelerator.is_main_process:
            logger.warning("%s", stop)
        return stop


def stop_if_preempted(preemption: Preemption, loop: TrainingLoop, prefix: str) -> None:
    """A job's step boundary, after everything of the step (every process calls it): when the job is to stop, logs the
    steps since the last log under ``prefix`` (as at a job's last step), checkpoints this step unless the schedule
    just did, closes the loop's logs and raises ``Preempted``. Jobs whose state is ``TrainingLoop``'s alone use it
    (warm-up, ICT, QA fine-tuning); pre-training adds its own state (``Trainer.stop_preempted``)."""
    if loop.done or not (signum := preemption.agreed(loop.accelerator)):
        return
    if loop.window.num_steps:
        loop.log_window(prefix)
    if not loop.save_due():
        loop.save()
    loop.close()
    raise preemption.stop(loop.accelerator, loop.step, signum)
