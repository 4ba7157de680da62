"""A diverged job stops in one line naming the step, before anything is saved: a non-finite loss (an infinite
learning rate, a bad batch) and non-finite weights after a finite loss (a NaN gradient, which clipping spreads to every
weight) are user errors raised by the shared training loop, so no checkpoint or export holds NaN weights."""

import math

import pytest
import torch
from accelerate import Accelerator

from realm.core.errors import UserError
from realm.run.layout import checkpoints_dir
from realm.training.optim import OptimConfig
from realm.training.scaffold import LoopConfig, TrainingLoop


def _loop(run_dir, **train) -> TrainingLoop:
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    model, optimizer = accelerator.prepare(model, optimizer)
    cfg = LoopConfig(run_dir=str(run_dir), max_steps=4, **train)
    loop = TrainingLoop(accelerator, cfg, OptimConfig(max_grad_norm=1.0), model, optimizer, scheduler, cfg)
    loop.resume()
    return loop


def _step(loop: TrainingLoop, scale: float = 1.0, nan_gradient: bool = False) -> None:
    """One optimizer step on a fixed batch, its loss times ``scale``, as a job's loop does it."""
    loss = loop.model(torch.ones(3, 4)).pow(2).mean() * scale
    loop.accelerator.backward(loss)
    if nan_gradient:
        next(loop.model.parameters()).grad[0, 0] = math.nan
    loop.window.add({"loss": loss.detach()})
    loop.optimizer_step()


def test_a_nan_loss_stops_the_job_at_the_checkpoint_naming_its_step_and_nothing_is_saved(tmp_path):
    loop = _loop(tmp_path, log_interval=100, save_interval=3)
    _step(loop)
    assert loop.end_step("train") is None
    _step(loop, scale=math.nan)  # step 2
    _step(loop)  # step 3: the weights are NaN since step 2; the checkpoint of step 3 is due
    with pytest.raises(UserError, match=r"non-finite loss \(nan\) at step 2; nothing .* saved"):
        loop.end_step("train")
    assert not list(checkpoints_dir(tmp_path).glob("step-*"))


def test_a_nan_loss_stops_the_job_when_its_window_is_logged(tmp_path):
    loop = _loop(tmp_path, log_interval=1, save_interval=100)
    _step(loop)
    loop.end_step("train")
    _step(loop, scale=math.inf)
    with pytest.raises(UserError, match=r"non-finite loss \(inf\) at step 2"):
        loop.end_step("train")


def test_a_nan_gradient_under_a_finite_loss_is_caught_before_its_checkpoint(tmp_path):
    loop = _loop(tmp_path, log_interval=100, save_interval=2)
    _step(loop)
    loop.end_step("train")
    _step(loop, nan_gradient=True)  # the loss of step 2 is finite; clipping spreads the NaN to every weight
    assert all(torch.isnan(p).all() for p in loop.model.parameters())
    with pytest.raises(UserError, match=r"non-finite weights after step 2"):
        loop.end_step("train")
    assert not list(checkpoints_dir(tmp_path).glob("step-*"))
