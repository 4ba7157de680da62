"""A preempted trainer (SIGTERM mid-run, as SLURM sends before it takes the nodes) checkpoints the step it stopped at,
exits with ``PREEMPTED_EXIT_CODE`` and one line saying so, and the same command resumes it to the uninterrupted run's
losses and index versions at every step, no step logged twice. The jobs on the training scaffold alone (reader
warm-up, ICT, QA fine-tuning) stop the same way at a SIGUSR1 (SLURM's advance warning) and resume exactly."""

import os
import signal
import subprocess
import sys

from pathlib import Path

import pytest
import torch

from realm.core.config import load_config
from realm.core.logging import read_metrics
from realm.finetune.train import Finetuner
from realm.run.publication import list_published, verify_published
from realm.training.preemption import PREEMPTED_EXIT_CODE, Preempted
from realm.training.scaffold import TrainingLoop
from realm.warmstart.ict_train import ICTConfig, train_ict
from realm.warmstart.warmup import WarmupConfig, train_warmup
from tests.helpers import ROOT, builder_pids, run_module, subprocess_env, tiny_qa_config
from tests.integration.trainer.conftest import per_step, wait_for_step
from tests.integration.training.test_exact_resume import SMALL_BERT, STEPS, _weights

SIGNAL_AFTER_STEP = 2


@pytest.mark.slow
def test_sigterm_checkpoints_the_step_it_stops_at_and_the_resumed_run_is_exact(straight, tmp_path):
    common, straight = straight
    # note: no periodic checkpoint before the last step, so the one the run resumes from is the preemption's
    args = [*common, "--train.save_interval=100"]
    run = tmp_path / "run"
    trainer = subprocess.Popen(
        [sys.executable, "-m", "realm.trainer.pretrain", *args, f"--train.run_dir={run}"],
        cwd=ROOT, env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for_step(run, SIGNAL_AFTER_STEP, trainer)
        trainer.send_signal(signal.SIGTERM)
        _, stderr = trainer.communicate(timeout=60)
    finally:
        trainer.kill()
    assert trainer.returncode == PREEMPTED_EXIT_CODE, stderr[-3000:]
    (stopped, checkpoint), *others = list_published(run / "checkpoints", "step-")
    assert others == [] and SIGNAL_AFTER_STEP <= stopped < 6, (stopped, others)
    verify_published(checkpoint)  # complete: every file its manifest lists, checksums matching
    assert not [p for p in (run / "checkpoints").iterdir() if p.name.startswith(".")]  # nothing half-written
    assert f"stopped by SIGTERM after step {stopped}, checkpointed" in stderr
    assert max(per_step(run, "train/loss")) == stopped  # the steps since the last log were logged
    assert not builder_pids(run)
    assert not (run / "DONE").exists()  # a standalone builder keeps waiting for the requeued run

    run_module("realm.trainer.pretrain", *args, f"--train.run_dir={run}")
    for key in ("train/loss", "index/version"):
        a, b = per_step(straight, key), per_step(run, key)
        assert sorted(a) == sorted(b) == list(range(1, 7)), key
        for step in a:
            assert b[step] == pytest.approx(a[step], rel=1e-5, abs=1e-6), (key, step, stopped)
    steps = [r["step"] for r in read_metrics(run / "metrics.jsonl") if "train/loss" in r]
    assert steps == sorted(set(steps)), "a step was logged twice"


def _ict(world: dict, run_dir: Path):
    cfg = load_config(ICTConfig, "configs/ict/demo.yaml", {
        "train": {"run_dir": str(run_dir), "max_steps": STEPS, "batch_size": 8, "log_interval": 2,
                  "save_interval": 100, "num_threads": 1},
        "data": {"tokenizer": str(world["tokenizer"]), "blocks": str(world["blocks"])},
        "model": SMALL_BERT, "retriever": {"embed_dim": 16, "max_block_length": 48},
    })  # fmt: skip
    return lambda: train_ict(cfg)


def _warmup(world: dict, run_dir: Path):
    cfg = load_config(WarmupConfig, "configs/warmup/demo.yaml", {
        "train": {"run_dir": str(run_dir), "max_steps": STEPS, "batch_size": 8, "log_interval": 2,
                  "save_interval": 100, "num_threads": 1},
        "data": {"tokenizer": str(world["tokenizer"]), "blocks": str(world["blocks"])},
        "model": SMALL_BERT, "retriever": {"max_block_length": 48},
    })  # fmt: skip
    return lambda: train_warmup(cfg)


def _finetune(world: dict, run_dir: Path):
    cfg = tiny_qa_config(world, run_dir, steps=STEPS, batch_size=4)
    cfg.train.log_interval, cfg.train.save_interval, cfg.model.dropout = 2, 100, 0.1
    cfg.finetune.eval_at_start = False
    return lambda: Finetuner(cfg).train()


@pytest.mark.parametrize("job, world, key, published", [
    (_ict, "tiny_world", "ict/loss", "retriever"),
    (_warmup, "tiny_world", "warmup/loss", "encoder"),
    (_finetune, "qa_world", "train/loss", "model"),
], ids=["ict", "warmup", "finetune"])  # fmt: skip
def test_a_scaffold_job_stops_at_a_signal_with_a_checkpoint_and_resumes_exactly(
    job, world, key, published, request, monkeypatch, tmp_path
):
    world = request.getfixturevalue(world)
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    job(world, straight)()
    step = TrainingLoop.optimizer_step

    def signalled_step(loop: TrainingLoop) -> None:  # a real signal, landing inside step 3 (mid log window)
        step(loop)
        if loop.step == 3:
            os.kill(os.getpid(), signal.SIGUSR1)

    monkeypatch.setattr(TrainingLoop, "optimizer_step", signalled_step)
    with pytest.raises(Preempted) as stop:
        job(world, interrupted)()
    monkeypatch.undo()
    assert stop.value.code == PREEMPTED_EXIT_CODE and stop.value.step == 3
    assert [s for s, _ in list_published(interrupted / "checkpoints", "step-")] == [3]
    verify_published(interrupted / "checkpoints" / "step-00000003")
    assert not (interrupted / published).exists()  # a stopped job publishes nothing
    assert max(r["step"] for r in read_metrics(interrupted / "metrics.jsonl")) == 3  # step 3 logged, not lost
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL  # the handler is put back

    job(world, interrupted)()
    a, b = per_step(straight, key), per_step(interrupted, key)
    assert sorted(a) == [2, 4, 6] and sorted(b) == [2, 3, 4, 6]
    for logged in (2, 6):
        assert b[logged] == pytest.approx(a[logged], rel=1e-5, abs=1e-6), logged
    # the preempted invocation logged step 3 alone, the resumed one step 4 alone: the straight run's window of both
    assert (b[3] + b[4]) / 2 == pytest.approx(a[4], rel=1e-5, abs=1e-6)
    wa, wb = _weights(straight / published), _weights(interrupted / published)
    assert wa.keys() == wb.keys() and wa
    for name in wa:
        torch.testing.assert_close(wb[name], wa[name], rtol=1e-5, atol=1e-6, msg=name)
