"""The loop's periodic actions: logs and checkpoints every interval and at the invocation's last step, evaluations
every interval from step 0 (the start of a learning curve) and never with an interval of 0."""

import torch
from accelerate import Accelerator

from realm.training.optim import OptimConfig
from realm.training.scaffold import LoopConfig, TrainingLoop


def _loop(tmp_path, **train) -> TrainingLoop:
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    cfg = LoopConfig(run_dir=str(tmp_path), **train)
    return TrainingLoop(accelerator, cfg, OptimConfig(), model, optimizer, scheduler, cfg)


def _due_steps(loop: TrainingLoop, due) -> list[int]:
    steps = []
    for step in range(loop.cfg.last_step + 1):
        loop.step = step
        if due():
            steps.append(step)
    return steps


def test_logs_and_saves_every_interval_and_at_the_last_step(tmp_path):
    loop = _loop(tmp_path, max_steps=10, log_interval=4, save_interval=3, stop_at_step=7)
    assert _due_steps(loop, loop.log_due) == [0, 4, 7]
    assert _due_steps(loop, loop.save_due) == [0, 3, 6, 7]
    loop.close()


def test_evaluates_every_interval_from_step_0_and_not_forced_at_the_last_step(tmp_path):
    loop = _loop(tmp_path, max_steps=7)
    assert _due_steps(loop, lambda: loop.eval_due(3)) == [0, 3, 6]
    assert _due_steps(loop, lambda: loop.eval_due(0)) == []  # 0: never
    loop.close()
