"""End to end on the tiny world: trainer and builder as separate processes, refreshes, checkpoints, exact resume."""

import json
import math
import shutil
import subprocess
import sys

import pytest
from safetensors.torch import load_file

from realm.core.logging import read_metrics
from realm.run.publication import list_published
from tests.helpers import ROOT, data_overrides, last_json, run_module, subprocess_env

pytestmark = pytest.mark.slow
TINY = "configs/pretrain/tiny.yaml"


def _losses(run_dir) -> dict[int, float]:
    return {r["step"]: r["train/loss"] for r in read_metrics(run_dir / "metrics.jsonl") if "train/loss" in r}


def test_trainer_and_separate_builder_train_refresh_save_and_resume(tiny_world, tmp_path):
    run = tmp_path / "run"
    run.mkdir()  # a builder refuses a run directory that does not exist (a mistyped path would wait forever)
    builder = subprocess.Popen(
        [sys.executable, "-m", "realm.index_builder.watch", "--config", "configs/index/tiny.yaml", f"--run_dir={run}"],
        cwd=ROOT,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        proc = run_module(
            "realm.trainer.pretrain",
            "--config",
            TINY,
            f"--train.run_dir={run}",
            "--refresh.spawn_builder=false",
            *data_overrides(tiny_world),
        )
        summary = last_json(proc.stdout)
        # a standalone builder exits by itself once the trainer has written DONE and everything is indexed
        builder.wait(timeout=60)
    finally:
        if builder.poll() is None:
            builder.kill()
    assert builder.returncode == 0, builder.stdout.read()[-3000:]
    assert summary["step"] == 6
    assert summary["num_index_refreshes"] >= 3  # the initial index plus refreshes after steps 2 and 4
    assert [p.name for _, p in list_published(run / "checkpoints", "step-")] == ["step-00000003", "step-00000006"]
    versions = list_published(run / "index", "v-")
    assert versions and all((p / "manifest.json").is_file() for _, p in versions)
    manifest = json.loads((versions[-1][1] / "manifest.json").read_text())
    assert manifest["num_vectors"] > 0 and manifest["dim"] == 16
    losses = _losses(run)
    assert sorted(losses) == [2, 4, 6] and all(math.isfinite(v) for v in losses.values())
    tables = [json.loads(line) for line in (run / "retrievals.jsonl").read_text().splitlines()]
    assert sorted({row["step"] for row in tables}) == [2, 4, 6] and len(tables) == 12  # 4 sampled queries a step
    assert all(len(row["slots"]) == 4 and row["slots"][0]["title"] == "(null document)" for row in tables)
    assert all(abs(sum(slot["p_z"] for slot in row["slots"]) - 1) < 1e-4 for row in tables)

    # resume to 8 steps: exactly 2 more, from the newest complete checkpoint
    proc = run_module(
        "realm.trainer.pretrain",
        "--config",
        TINY,
        f"--train.run_dir={run}",
        "--train.max_steps=8",
        *data_overrides(tiny_world),
    )
    assert last_json(proc.stdout)["step"] == 8
    assert sorted(_losses(run)) == [2, 4, 6, 8]
    assert "resumed from" in proc.stderr and "step-00000006" in proc.stderr


def test_stopped_and_resumed_run_reaches_the_same_losses(tiny_world, tmp_path):
    # the retriever's own warm-up (4 steps; the encoder's is 2): two schedules to checkpoint and resume
    common = ["--config", TINY, "--train.log_interval=1", "--train.save_interval=100",
              "--optim.retriever_warmup_steps=4", *data_overrides(tiny_world)]  # fmt: skip
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    run_module("realm.trainer.pretrain", *common, f"--train.run_dir={straight}")
    run_module("realm.trainer.pretrain", *common, f"--train.run_dir={interrupted}", "--train.stop_at_step=3")
    assert sorted(_losses(interrupted)) == [1, 2, 3]
    # the LR schedule is checkpointed as JSON, never as a pickle accelerate would load with weights_only=False
    checkpoint = interrupted / "checkpoints" / "step-00000003"
    assert (checkpoint / "scheduler.json").is_file() and not list(checkpoint.glob("custom_checkpoint_*"))
    # what a run killed after step 4 leaves beside its step-3 checkpoint: a step-4 export, its index made live, and
    # records of step 4 (stand-ins: the step-2 export and index relabelled as step 4)
    for parent, old_name, new_name in (("retriever", "step-00000002", "step-00000004"), ("index", "v-00000002", "v-00000004")):
        shutil.copytree(interrupted / parent / old_name, interrupted / parent / new_name)
        manifest = interrupted / parent / new_name / "manifest.json"
        manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "step": 4}))
    (interrupted / "index" / "CURRENT").write_text("v-00000004")
    with open(interrupted / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 4, "train/loss": 0.0}) + "\n" + '{"step": 5, "train/lo')  # and a torn line
    run_module("realm.trainer.pretrain", *common, f"--train.run_dir={interrupted}")
    records = read_metrics(interrupted / "metrics.jsonl")
    versions = [{r["step"]: r["index/version"] for r in read_metrics(run / "metrics.jsonl") if "index/version" in r}
                for run in (straight, interrupted)]  # fmt: skip
    assert versions[0] == versions[1]  # the same index at every step: never the killed run's future one
    assert [r["step"] for r in records if "train/loss" in r] == list(range(1, 7))  # no step twice
    a, b = _losses(straight), _losses(interrupted)
    assert sorted(a) == sorted(b) == [1, 2, 3, 4, 5, 6]
    for step in a:
        assert b[step] == pytest.approx(a[step], rel=1e-5, abs=1e-6), f"step {step}: {a[step]} vs {b[step]}"
    for key in ("train/lr", "train/retriever_lr"):
        lrs = [{r["step"]: r[key] for r in read_metrics(run / "metrics.jsonl") if key in r}
               for run in (straight, interrupted)]  # fmt: skip
        assert lrs[0] == lrs[1] and len(set(lrs[0].values())) > 2, key
    rates = {r["step"]: (r["train/lr"], r["train/retriever_lr"])
             for r in read_metrics(straight / "metrics.jsonl") if "train/lr" in r}  # fmt: skip
    assert rates[1][1] < rates[1][0] and rates[4][1] > rates[4][0]  # slower up (peak at step 4), later down


def test_prefetched_candidates_resume_exactly(tiny_world, tmp_path):
    """With candidates searched ahead (one step stale across steps), a checkpoint keeps the choice made for the next
    micro-batch, so a run stopped after step 3 and resumed trains on exactly what an uninterrupted one did."""
    common = ["--config", TINY, "--train.log_interval=1", "--train.save_interval=100", "--train.grad_accum_steps=2",
              "--train.prefetch_candidates=true", *data_overrides(tiny_world)]  # fmt: skip
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    run_module("realm.trainer.pretrain", *common, f"--train.run_dir={straight}")
    run_module("realm.trainer.pretrain", *common, f"--train.run_dir={interrupted}", "--train.stop_at_step=3")
    choice = load_file(interrupted / "checkpoints" / "step-00000003" / "rank-0.safetensors")
    assert choice["block_ids"].shape == (8, 3) and (choice["block_ids"] >= 0).all()  # 8 queries, K-1 = 3 blocks
    proc = run_module("realm.trainer.pretrain", *common, f"--train.run_dir={interrupted}")
    assert "attached the candidates the checkpoint's run searched ahead" in proc.stderr
    a, b = _losses(straight), _losses(interrupted)
    assert sorted(a) == sorted(b) == [1, 2, 3, 4, 5, 6]
    for step in a:
        assert b[step] == pytest.approx(a[step], rel=1e-5, abs=1e-6), f"step {step}: {a[step]} vs {b[step]}"


def test_reproducible_swaps_put_each_index_live_at_its_step_in_every_run(tiny_world, tmp_path):
    """refresh.swap_lag=1: the export of step s goes live before step s + 2 (the swap before step s + 1 + 1), however
    fast the builder is; max_staleness is large, so without the lag which step a version arrives at is timing. Two
    runs and one stopped at step 3 and resumed (its step-2 version loaded from disk) train identically."""
    common = ["--config", TINY, "--train.log_interval=1", "--train.save_interval=100", "--refresh.swap_lag=1",
              "--refresh.max_staleness=100", *data_overrides(tiny_world)]  # fmt: skip
    runs = [tmp_path / name for name in ("a", "b", "resumed")]
    for run in runs[:2]:
        run_module("realm.trainer.pretrain", *common, f"--train.run_dir={run}")
    run_module("realm.trainer.pretrain", *common, f"--train.run_dir={runs[2]}", "--train.stop_at_step=3")
    run_module("realm.trainer.pretrain", *common, f"--train.run_dir={runs[2]}")
    for run in runs:
        versions = {r["step"]: r["index/version"] for r in read_metrics(run / "metrics.jsonl") if "index/version" in r}
        assert versions == {1: 0, 2: 0, 3: 0, 4: 2, 5: 2, 6: 4}, run.name
    a = _losses(runs[0])
    for run in runs[1:]:
        b = _losses(run)
        assert sorted(b) == [1, 2, 3, 4, 5, 6]
        for step in a:
            assert b[step] == pytest.approx(a[step], rel=1e-5, abs=1e-6), f"{run.name} step {step}"
