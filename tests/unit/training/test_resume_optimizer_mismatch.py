"""A checkpoint whose optimizer has other parameter groups than the resuming run's (a run saved with
``retriever.frozen`` resumed without it, or the reverse) stops with one line naming it, not torch's traceback."""

import pytest
import torch
from accelerate import Accelerator

from realm.core.errors import RunError
from realm.training.optim import OptimConfig
from realm.training.scaffold import LoopConfig, TrainingLoop


def _loop(tmp_path, frozen: bool) -> TrainingLoop:
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    model[0].requires_grad_(not frozen)
    groups = [{"params": list(layer.parameters())} for layer in model if not frozen or layer is not model[0]]
    optimizer = torch.optim.AdamW(groups, lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    model, optimizer = accelerator.prepare(model, optimizer)
    cfg = LoopConfig(run_dir=str(tmp_path), max_steps=4, save_interval=2)
    return TrainingLoop(accelerator, cfg, OptimConfig(), model, optimizer, scheduler, cfg)


@pytest.mark.parametrize("saved_frozen", [True, False])
def test_resuming_with_other_parameter_groups_is_a_one_line_error(tmp_path, saved_frozen):
    loop = _loop(tmp_path, frozen=saved_frozen)
    loop.step = 2
    final = loop.save({})
    loop.close()
    assert _loop(tmp_path, frozen=saved_frozen).resume()["step"] == 2  # the same groups resume
    with pytest.raises(RunError, match=f"{final}: its optimizer state does not fit .*retriever.frozen"):
        _loop(tmp_path, frozen=not saved_frozen).resume()
