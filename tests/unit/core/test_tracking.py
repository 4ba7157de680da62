"""Tracking: config checks, W&B mode and dirs, and an offline W&B run through accelerate (its retrieval-table rows
from ``tests/unit/conftest.py``)."""

import json
import os
import socket
from pathlib import Path

import pytest

from realm.core.tracking import (
    TrackingConfig,
    accelerator_kwargs,
    configure_wandb_env,
    finish_builder_run,
    flatten_config,
    init_builder_run,
    init_trackers,
    log_builder,
    log_summary_run,
    resolve_wandb_mode,
)
from realm.finetune.evaluate_qa import write_evaluation
from realm.pretrain.retrieval_table import SLOT_FIELDS, log_retrieval_table, slot_rows
from realm.run.layout import RETRIEVALS_FILE
from tests.wandb_records import offline_runs as read_offline_runs


def test_config_validation():
    TrackingConfig(report_to="all", wandb_mode="offline", inspect_interval=5)
    for bad in (
        {"report_to": "comet"},
        {"wandb_mode": "dryrun"},
        {"inspect_interval": -1},
        {"num_inspect_rows": 0},
        {"project": " "},
    ):
        with pytest.raises(ValueError):
            TrackingConfig(**bad)
    cfg = TrackingConfig(inspect_interval=5)
    assert [s for s in range(12) if cfg.is_inspect_due(s)] == [5, 10]
    assert not any(TrackingConfig().is_inspect_due(s) for s in range(12))


def test_no_trackers_means_no_accelerator_arguments_and_no_builder_run(tmp_path):
    assert accelerator_kwargs(TrackingConfig(), tmp_path) == {}
    assert init_builder_run(TrackingConfig(report_to="none"), tmp_path) is None


def test_auto_mode_is_offline_without_credentials(monkeypatch, tmp_path):
    for name in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_MODE", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    cfg = TrackingConfig(report_to="wandb")
    assert resolve_wandb_mode(cfg) == "offline"
    (tmp_path / "netrc").write_text("machine api.wandb.ai\n  login user\n  password abc\n")
    os.chmod(tmp_path / "netrc", 0o600)
    assert resolve_wandb_mode(cfg) == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert resolve_wandb_mode(cfg) == "disabled"  # the environment wins over auto
    assert resolve_wandb_mode(TrackingConfig(wandb_mode="offline")) == "offline"


def _forget_wandb_dirs(monkeypatch) -> None:
    """Unsets the folders configure_wandb_env manages; monkeypatch also removes them again at teardown, since the
    code under test sets them."""
    for name in (
        "WANDB_DIR",
        "WANDB_CACHE_DIR",
        "WANDB_DATA_DIR",
        "WANDB_CONFIG_DIR",
        "WANDB_ARTIFACT_DIR",
        "REALM_WANDB_ENV_OWNED",
    ):
        monkeypatch.delenv(name, raising=False)


def test_wandb_dirs_go_under_the_run_dir_unless_the_user_set_them(monkeypatch, tmp_path):
    _forget_wandb_dirs(monkeypatch)
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "mine"))
    first = configure_wandb_env(tmp_path / "run1")
    assert first["WANDB_DIR"] == str((tmp_path / "run1").resolve())
    assert first["WANDB_CONFIG_DIR"].startswith(str((tmp_path / "run1").resolve()))
    assert first["WANDB_CACHE_DIR"] == str(tmp_path / "mine")
    second = configure_wandb_env(tmp_path / "run2")  # ours are re-pointed, the user's stays
    assert second["WANDB_DATA_DIR"].startswith(str((tmp_path / "run2").resolve()))
    assert second["WANDB_CACHE_DIR"] == str(tmp_path / "mine")


def test_flatten_config_uses_dotted_keys():
    assert flatten_config({"optim": {"lr": 1e-4, "betas": [0.9, 0.99]}, "seed": 0}) == {
        "optim.lr": 1e-4,
        "optim.betas": "[0.9, 0.99]",
        "seed": 0,
    }


PREDICTIONS = [
    {"question": "Who wrote Hamlet?", "answers": ["Shakespeare", "William Shakespeare"], "prediction": "shakespeare",
     "correct": True, "prediction_block": 7, "block_ids": [7, 3], "titles": ["Hamlet", "Macbeth"], "scores": [3.5, 1.25],
     "has_answer": [True, False]},
    {"question": "Where?", "answers": ["Paris"], "prediction": "", "correct": False, "prediction_block": -1,
     "block_ids": [], "titles": [], "scores": [], "has_answer": []},
]  # fmt: skip
"""Two records as ``realm.qa.qa_eval.evaluate_qa`` writes them (the second retrieved nothing)."""


def _files_under(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.is_file()] if path.exists() else []


def test_offline_wandb_run_through_accelerate_stays_in_the_run_dir(rows, tmp_path, monkeypatch):
    from accelerate import Accelerator

    for name in list(os.environ):
        if name.startswith("WANDB_") or name in ("REALM_WANDB_ENV_OWNED", "NETRC"):
            monkeypatch.delenv(name)
    _forget_wandb_dirs(monkeypatch)
    home = tmp_path / "home"
    for sub, var in (
        (".", "HOME"),
        ("cache", "XDG_CACHE_HOME"),
        ("config", "XDG_CONFIG_HOME"),
        ("data", "XDG_DATA_HOME"),
        ("state", "XDG_STATE_HOME"),
    ):
        (home / sub).mkdir(parents=True, exist_ok=True)
        monkeypatch.setenv(var, str(home / sub))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    attempts = []
    real_connect = socket.socket.connect

    def guarded_connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in ("127.0.0.1", "::1", "localhost"):
            attempts.append(address)
            raise OSError(f"network access attempted: {address}")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)

    run_dir = tmp_path / "runs" / "tiny"
    cfg = TrackingConfig(report_to="wandb", wandb_mode="auto", project="realm-test")
    accelerator = Accelerator(**accelerator_kwargs(cfg, run_dir))
    try:
        init_trackers(accelerator, cfg, run_dir, {"train": {"batch_size": 2}, "optim": {"lr": 1e-4}})
        run = accelerator.get_tracker("wandb", unwrap=True)
        assert run.settings.mode == "offline"  # auto without credentials
        assert run.group == "tiny" and run.name == "tiny"
        accelerator.log({"train/loss": 1.0}, step=6)
        log_retrieval_table(accelerator, rows, step=6, run_dir=run_dir)
        write_evaluation(run_dir, "dev", {"exact_match": 0.5}, PREDICTIONS, accelerator, step=6)  # QA evaluation
        accelerator.end_training()
        builder = init_builder_run(cfg, run_dir)  # what the index builder process does
        assert builder.group == "tiny" and builder.job_type == "index_builder" and builder.settings.mode == "offline"
        log_builder(builder, {"index/build_s": 1.5}, step=4)
        finish_builder_run(builder)
        log_summary_run(cfg, run_dir, {"heldout_accuracy_retrieval": 0.5, "stage_seconds": {"qa_s": 2.0}})
    finally:
        accelerator.end_training()
        import wandb

        wandb.teardown()

    assert attempts == []
    offline_runs = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline_runs) == 3
    records = read_offline_runs(run_dir)["pipeline"]  # a pipeline's summary.json, in its own run of the group
    (record,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert (record.run_group, record.display_name) == ("tiny", "tiny-pipeline")
    summary = {i.key or "/".join(i.nested_key): json.loads(i.value_json)
               for r in records if r.WhichOneof("record_type") == "summary" for i in r.summary.update}  # fmt: skip
    assert summary["heldout_accuracy_retrieval"] == 0.5 and summary["stage_seconds"] == {"qa_s": 2.0}
    (offline,) = [r for r in offline_runs if (r / "files" / "media").exists()]
    tables = [json.loads(p.read_text()) for p in (offline / "files" / "media" / "table").rglob("*.table.json")]
    assert len(tables) == 2
    (table,) = [t for t in tables if "question" not in t["columns"]]
    # long format: one row per query x slot, so W&B can filter by slot and group by has_gold
    assert table["columns"] == list(slot_rows(rows[0])[0])
    assert table["columns"][-len(SLOT_FIELDS) - 1 :] == ["slot", *SLOT_FIELDS]
    assert len(table["data"]) == sum(len(r["slots"]) for r in rows)
    column = {name: i for i, name in enumerate(table["columns"])}
    first = [r for r in table["data"] if r[column["example_id"]] == rows[0]["example_id"]]
    assert [r[column["slot"]] for r in first] == list(range(len(rows[0]["slots"])))
    assert [r[column["has_gold"]] for r in first] == [s["has_gold"] for s in rows[0]["slots"]]
    (predictions,) = [t for t in tables if "question" in t["columns"]]
    assert predictions["columns"] == ["question_id", "question", "answers", "prediction", "correct",
                                      "prediction_title", "rank", "block_id", "title", "score", "has_answer",
                                      "is_prediction_block"]  # fmt: skip
    assert predictions["data"] == [
        [0, "Who wrote Hamlet?", "Shakespeare | William Shakespeare", "shakespeare", True, "Hamlet", 0, 7, "Hamlet",
         3.5, True, True],
        [0, "Who wrote Hamlet?", "Shakespeare | William Shakespeare", "shakespeare", True, "Hamlet", 1, 3, "Macbeth",
         1.25, False, False],
        [1, "Where?", "Paris", "", False, "", None, None, None, None, None, None],  # retrieved nothing: one row
    ]  # fmt: skip
    assert len((run_dir / RETRIEVALS_FILE).read_text().splitlines()) == len(rows)
    assert _files_under(home) == [] and _files_under(cwd) == []


def test_tensorboard_tracker_writes_logged_scalars_under_the_run_dir(tmp_path):
    pytest.importorskip("tensorboard")
    from accelerate import Accelerator
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from realm.core.tracking import TrackingConfig, accelerator_kwargs, init_trackers

    cfg = TrackingConfig(report_to="tensorboard", project="realm-test")
    accelerator = Accelerator(**accelerator_kwargs(cfg, tmp_path))
    init_trackers(accelerator, cfg, tmp_path, {"optim": {"lr": 0.001}})
    for step, loss in enumerate([3.0, 2.5, 2.0], start=1):
        accelerator.log({"train/loss": loss}, step=step)
    accelerator.end_training()
    event_files = list(tmp_path.rglob("events.out.tfevents.*"))
    assert event_files and all(tmp_path in f.parents for f in event_files)
    scalars = []
    for f in event_files:
        events = EventAccumulator(str(f))
        events.Reload()
        if "train/loss" in events.Tags()["scalars"]:
            scalars = [(e.step, e.value) for e in events.Scalars("train/loss")]
    assert scalars == [(1, 3.0), (2, 2.5), (3, 2.0)]
