"""Every log a job appends is cut back to what its checkpoint recorded when it starts, on a fresh start as on a resume:
a run killed before its first checkpoint (SIGKILL or SIGTERM at step 2) leaves records that the restarted run logs
again, so they must go, from every appended log and not only from ``metrics.jsonl``."""

import json

import torch
from accelerate import Accelerator

from realm.run.layout import METRICS_FILE, RETRIEVALS_FILE
from realm.training.optim import OptimConfig
from realm.training.scaffold import LoopConfig, TrainingLoop


def _loop(run_dir) -> TrainingLoop:
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    model, optimizer = accelerator.prepare(model, optimizer)
    cfg = LoopConfig(run_dir=str(run_dir), max_steps=4, save_interval=2)
    return TrainingLoop(accelerator, cfg, OptimConfig(), model, optimizer, scheduler, cfg)


def _killed_before_its_first_checkpoint(run_dir) -> None:
    """What a run killed at step 2 leaves: the evaluation of its starting model (step 0), the records of steps 1-2 and
    the retrieval table of step 2, but no checkpoint."""
    run_dir.mkdir(parents=True, exist_ok=True)
    records = [{"step": 0, "eval/accuracy": 0.1}, {"step": 1, "train/loss": 7.0}, {"step": 2, "train/loss": 6.9}]
    (run_dir / METRICS_FILE).write_text("".join(json.dumps(r) + "\n" for r in records))
    (run_dir / RETRIEVALS_FILE).write_text(json.dumps({"step": 2, "query": "q", "slots": []}) + "\n")


def test_a_fresh_start_cuts_every_appended_log_a_killed_run_left(tmp_path):
    _killed_before_its_first_checkpoint(tmp_path)
    loop = _loop(tmp_path)
    loop.appended_logs.append(RETRIEVALS_FILE)  # as the pre-training trainer registers its retrieval tables
    assert loop.resume() == {} and loop.step == 0
    loop.close()
    assert (tmp_path / METRICS_FILE).read_text() == ""  # the step-0 evaluation too: the restarted run logs it again
    assert (tmp_path / RETRIEVALS_FILE).read_text() == ""


def test_a_resume_cuts_every_appended_log_to_its_checkpoint(tmp_path):
    loop = _loop(tmp_path)
    loop.appended_logs.append(RETRIEVALS_FILE)
    loop.resume()
    loop.metrics.log({"train/loss": 7.0}, 1)
    (tmp_path / RETRIEVALS_FILE).write_text('{"step": 1}\n')
    loop.step = 1
    loop.save()
    loop.metrics.log({"train/loss": 6.9}, 2)  # after the checkpoint: a killed run's records
    with open(tmp_path / RETRIEVALS_FILE, "a") as f:
        f.write('{"step": 2}\n')
    loop.close()

    resumed = _loop(tmp_path)
    resumed.appended_logs.append(RETRIEVALS_FILE)
    assert resumed.resume()["step"] == 1
    resumed.close()
    assert [json.loads(line)["step"] for line in (tmp_path / METRICS_FILE).read_text().splitlines()] == [1]
    assert (tmp_path / RETRIEVALS_FILE).read_text() == '{"step": 1}\n'
