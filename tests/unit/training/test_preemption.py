"""The preemption flag: a real SIGTERM or SIGUSR1 only sets it (the process keeps running), the previous handlers come
back afterwards, and every process agrees to stop when any one of them got the signal (one gather), whichever ranks
the launcher signalled."""

import os
import signal
import threading

import pytest
import torch

from realm.training.preemption import PREEMPTED_EXIT_CODE, Preempted, Preemption


class FakeAccelerator:
    """``gather`` over ``num_processes`` ranks: this rank's tensor followed by the other ranks' flags."""

    def __init__(self, others: list[int] = (), is_main_process: bool = True) -> None:
        self.others = list(others)
        self.num_processes = 1 + len(self.others)
        self.is_main_process = is_main_process
        self.device = torch.device("cpu")
        self.num_gathers = 0

    def gather(self, tensor: torch.Tensor) -> torch.Tensor:
        self.num_gathers += 1
        return torch.cat([tensor, torch.tensor(self.others, dtype=tensor.dtype)])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1])
def test_a_signal_sets_the_flag_and_the_previous_handler_comes_back(sig):
    before = signal.getsignal(sig)
    with Preemption() as preemption:
        assert preemption.agreed(FakeAccelerator()) == 0
        os.kill(os.getpid(), sig)  # note: Python runs the handler before the next bytecode of the main thread
        os.kill(os.getpid(), signal.SIGTERM)  # a second signal keeps the first
        assert preemption.received == sig
        assert preemption.agreed(FakeAccelerator()) == sig
    assert signal.getsignal(sig) is before


def test_every_rank_stops_when_any_rank_got_the_signal():
    quiet, signalled = Preemption(), Preemption()
    signalled.received = signal.SIGUSR1
    # rank 0 (no signal) hears of rank 1's; rank 1 of its own; both from one gather, at the same step
    rank0, rank1 = FakeAccelerator(others=[signal.SIGUSR1]), FakeAccelerator(others=[0], is_main_process=False)
    assert quiet.agreed(rank0) == signalled.agreed(rank1) == signal.SIGUSR1
    assert rank0.num_gathers == rank1.num_gathers == 1
    assert quiet.agreed(FakeAccelerator(others=[0, 0])) == 0  # nobody was signalled: nobody stops


def test_a_single_process_decides_without_a_collective():
    accelerator = FakeAccelerator()
    Preemption().agreed(accelerator)
    assert accelerator.num_gathers == 0


def test_the_stop_is_a_system_exit_with_the_preemption_code_and_one_line():
    stop = Preemption().stop(FakeAccelerator(), 7, signal.SIGTERM)
    assert isinstance(stop, Preempted) and isinstance(stop, SystemExit) and not isinstance(stop, Exception)
    assert stop.code == PREEMPTED_EXIT_CODE == 128 + signal.SIGTERM
    assert str(stop) == "stopped by SIGTERM after step 7, checkpointed; the same command resumes (exit code 143)"


def test_off_the_main_thread_nothing_is_installed():
    before = signal.getsignal(signal.SIGTERM)
    preemption = Preemption()
    thread = threading.Thread(target=preemption.install)
    thread.start()
    thread.join()
    assert signal.getsignal(signal.SIGTERM) is before
    preemption.restore()
