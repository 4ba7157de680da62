"""The refresh schedule and checkpoint resolution."""

import logging

import pytest

from realm.pretrain.refresh import RefreshConfig, RefreshSchedule
from realm.core.errors import RunError
from realm.run.publication import file_entries, new_staging, publish_folder
from realm.training.checkpoint import resolve_resume


def test_piecewise_schedule_is_due_on_its_intervals():
    schedule = RefreshSchedule.parse("0-1000:100,1000-:1000")
    due = [s for s in range(0, 3500) if schedule.is_due(s)]
    assert due == [100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 2000, 3000]
    assert not RefreshSchedule.parse("0-:5").is_due(0)  # the initial export happens at start-up


@pytest.mark.parametrize("bad", ["0-10", "10-5:2", "0-:0", "0-100:10,50-:10", "x"])
def test_bad_schedules_are_rejected(bad):
    with pytest.raises(ValueError, match="refresh schedule"):
        RefreshSchedule.parse(bad)


def test_refresh_config_builds_its_schedule():
    assert RefreshConfig(refresh_interval=7).schedule().is_due(14)
    assert RefreshConfig(refresh_schedule="0-:3").schedule().is_due(3)


def test_a_frozen_retrievers_schedule_has_only_the_initial_export():
    schedule = RefreshConfig(refresh_interval=2, refresh_schedule="0-10:1,10-:5").schedule(initial_only=True)
    assert not any(schedule.is_due(s) for s in range(0, 1000))
    assert schedule.last_export(10**12) == 0  # at once: no scan back over every step


def test_last_export_is_the_newest_export_at_or_before_a_step():
    schedule = RefreshSchedule.parse("0-1000:100,1000-:1000")
    brute = lambda step: max([0] + [s for s in range(1, step + 1) if schedule.is_due(s)])  # noqa: E731
    assert [schedule.last_export(s) for s in range(0, 3100, 7)] == [brute(s) for s in range(0, 3100, 7)]


@pytest.mark.parametrize("lag, ok", [(-1, True), (0, True), (99, True), (100, False), (-2, False)])
def test_swap_lag_stays_below_the_shortest_export_interval(lag, ok):
    if ok:
        RefreshConfig(refresh_interval=100, swap_lag=lag)
    else:
        with pytest.raises(ValueError, match="swap_lag"):
            RefreshConfig(refresh_interval=100, swap_lag=lag)
    with pytest.raises(ValueError, match=r"in \[0, 50\)"):
        RefreshConfig(refresh_schedule="0-500:50,500-:200", swap_lag=60)


def test_resume_picks_latest_complete_checkpoint(tmp_path):
    parent = tmp_path / "checkpoints"
    for step in (3, 6):
        staging = new_staging(parent)
        (staging / "model.safetensors").write_bytes(b"x")
        publish_folder(staging, parent / f"step-{step:08d}", {"step": step})
    (parent / "step-00000009").mkdir()  # a crash before its manifest: never resumed from
    assert resolve_resume(tmp_path, "auto") == parent / "step-00000006"
    assert resolve_resume(tmp_path, "never") is None
    with pytest.raises(FileNotFoundError, match="not a complete checkpoint"):
        resolve_resume(tmp_path, str(parent / "step-00000009"))


def _publish_checkpoint(parent, step: int, payload: bytes):
    staging = new_staging(parent)
    (staging / "model.safetensors").write_bytes(payload)
    return publish_folder(staging, parent / f"step-{step:08d}", {"step": step, "files": file_entries(staging, ["model.safetensors"])})


def test_a_corrupt_checkpoint_is_reported_and_the_next_older_one_is_used(tmp_path, caplog):
    parent = tmp_path / "checkpoints"
    _publish_checkpoint(parent, 3, b"good weights")
    newest = _publish_checkpoint(parent, 6, b"new weights")
    (newest / "model.safetensors").write_bytes(b"new weightz")  # a flipped byte, same size
    with caplog.at_level(logging.ERROR):
        assert resolve_resume(tmp_path, "auto") == parent / "step-00000003"
    assert "step-00000006 fails verification (model.safetensors does not match its sha256" in caplog.text
    with pytest.raises(RunError, match="fails verification"):
        resolve_resume(tmp_path, str(newest))
    (parent / "step-00000003" / "model.safetensors").write_bytes(b"short")  # truncated
    with pytest.raises(RunError, match="no checkpoint under .* passes verification"):
        resolve_resume(tmp_path, "auto")


def test_retriever_parameters_get_their_own_learning_rate():
    from transformers import BertConfig

    from realm.models.retriever import RetrieverConfig
    from realm.pretrain.model import RealmModel
    from realm.training.optim import OptimConfig, build_optimizer

    config = BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    model = RealmModel.from_config(config, RetrieverConfig(embed_dim=8))
    optimizer, _ = build_optimizer(model, OptimConfig(lr=1e-3, retriever_lr_scale=0.1, warmup_steps=0), 10)
    by_param = {id(p): g["initial_lr"] for g in optimizer.param_groups for p in g["params"]}
    assert all(by_param[id(p)] == pytest.approx(1e-4) for p in model.retriever.parameters())
    assert all(by_param[id(p)] == pytest.approx(1e-3) for p in model.encoder.parameters())
    assert len(by_param) == len(list(model.parameters()))  # every parameter exactly once


@pytest.mark.parametrize(
    "schedule, decay_steps, expected",
    [
        ("linear", 0, [0.0, 0.5, 1.0, 0.8, 0.6, 0.4, 0.2]),  # down to 0 at the last step (BERT)
        ("wsd", 2, [0.0, 0.5, 1.0, 1.0, 1.0, 1.0, 0.5]),  # held, then annealed over the last 2 steps
        ("wsd", 0, [0.0, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0]),  # held to the end
    ],
)
def test_learning_rate_schedules(schedule, decay_steps, expected, tmp_path):
    import json

    from torch import nn

    from realm.training.optim import OptimConfig, build_optimizer

    cfg = OptimConfig(lr=1.0, warmup_steps=2, schedule=schedule, decay_steps=decay_steps)
    optimizer, scheduler = build_optimizer(nn.Linear(2, 2), cfg, 7)
    lrs = []
    for step in range(7):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
        if step == 3:  # a resume mid-schedule restores it from the JSON state checkpoints keep
            state = json.loads(json.dumps(scheduler.state_dict()))
            optimizer, scheduler = build_optimizer(nn.Linear(2, 2), cfg, 7)
            scheduler.load_state_dict(state)
            optimizer.param_groups[0]["lr"] = scheduler.get_last_lr()[0]
    assert lrs == pytest.approx(expected)


def test_unknown_schedule_is_rejected():
    from realm.training.optim import OptimConfig

    with pytest.raises(ValueError, match="schedule must be one of"):
        OptimConfig(schedule="constant")
