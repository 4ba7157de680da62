"""Tracking: config checks, W&B mode and dirs, retrieval-table rows, and an offline W&B run through accelerate."""

import json
import math
import os
import socket
from pathlib import Path

import datasets
import pytest
import torch

from finetune.evaluate import write_evaluation
from realm.core.tracking import (
    TrackingConfig,
    accelerator_kwargs,
    configure_wandb_env,
    finish_builder_run,
    flatten_config,
    init_builder_run,
    init_trackers,
    log_builder,
    resolve_wandb_mode,
)
from realm.data.blocks import BlockStore, uid_hash
from realm.data.packing import SpecialIds
from realm.data.vocab import train_wordpiece
from realm.pretrain.batch import RealmBatch
from realm.pretrain.candidates import build_candidates
from realm.pretrain.model import RealmOutput
from realm.pretrain.retrieval_table import (
    EMPTY_TITLE,
    NULL_TITLE,
    RETRIEVALS_FILE,
    contains_answer,
    flatten_row,
    log_retrieval_table,
    retrieval_rows,
)

BLOCKS = [
    ("France", "France is a country in Europe; its capital is Paris."),
    ("Germany", "Berlin is the capital of Germany."),
    ("Franchise", "A franchise is a business model, not a country."),
]
QUERIES = [("paris is the capital of france .", "france"), ("berlin is the capital of germany .", "germany")]
RETRIEVED = [[0, 1, -1], [1, 2, 0]]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    texts = [t for pair in BLOCKS for t in pair] + [q for q, _ in QUERIES]
    return train_wordpiece(texts * 3, vocab_size=300, out_dir=tmp_path_factory.mktemp("tok"), min_frequency=1)


@pytest.fixture(scope="module")
def store(tokenizer):
    enc = lambda s: tokenizer(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    return BlockStore(
        datasets.Dataset.from_dict(
            {
                "uid": [f"{i:040x}" for i in range(1, len(BLOCKS) + 1)],
                "doc_id": [str(i) for i in range(len(BLOCKS))],
                "title": [t for t, _ in BLOCKS],
                "text": [x for _, x in BLOCKS],
                "title_ids": [enc(t) for t, _ in BLOCKS],
                "body_ids": [enc(x) for _, x in BLOCKS],
            }
        )
    )


def _sublist_start(seq, sub):
    return next(i for i in range(len(seq)) if seq[i : i + len(sub)] == sub)


@pytest.fixture(scope="module")
def batch_and_output(tokenizer, store):
    special = SpecialIds.of(tokenizer)
    queries, positions, targets = [], [], []
    for sentence, answer in QUERIES:
        ids = tokenizer(sentence, add_special_tokens=False)["input_ids"]
        span = tokenizer(answer, add_special_tokens=False)["input_ids"]
        start = _sublist_start(ids, span)
        pos = list(range(start, start + len(span)))
        queries.append([special.cls] + [special.mask if i in pos else t for i, t in enumerate(ids)] + [special.sep])
        positions.append([p + 1 for p in pos])
        targets.append(span)
    lq, m = max(map(len, queries)), max(map(len, positions))
    padded = lambda rows, n, v: torch.tensor([r + [v] * (n - len(r)) for r in rows])  # noqa: E731
    batch = RealmBatch(
        query_input_ids=padded(queries, lq, special.pad),
        query_attention_mask=padded([[1] * len(q) for q in queries], lq, 0),
        mask_positions=padded(positions, m, 0),
        target_ids=padded(targets, m, special.pad),
        target_mask=padded([[1] * len(t) for t in targets], m, 0),
        source_uid_hashes=torch.tensor([uid_hash("nope"), 0]),
        example_ids=torch.tensor([10, 11]),
    )
    batch.candidates = build_candidates(batch, torch.tensor(RETRIEVED), store, special, max_block_length=32)
    gen = torch.Generator().manual_seed(0)
    bsz, k = batch.candidates.block_ids.shape
    logits = torch.randn(bsz, k, generator=gen).masked_fill(~batch.candidates.slot_mask, -1e4)
    token_log_probs = -torch.rand(bsz, k, m, generator=gen) * 3
    predictions = batch.target_ids.clone()
    predictions[1] = special.mask  # row 1 is wrong
    output = RealmOutput(logits, token_log_probs, predictions, predictions.clone())
    return batch, output


@pytest.fixture(scope="module")
def rows(batch_and_output, store, tokenizer):
    batch, output = batch_and_output
    return retrieval_rows(batch, output, store, tokenizer, index_version=4, staleness=2, step=6, max_rows=8)


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


def test_no_trackers_means_no_accelerator_arguments(tmp_path):
    assert accelerator_kwargs(TrackingConfig(), tmp_path) == {}


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


def test_contains_answer_normalises_case_accents_punctuation_and_word_boundaries():
    assert contains_answer("Born in the U.S. in 1990", "u . s .")
    assert contains_answer("Café  de\nFlore", "cafe de flore")
    assert not contains_answer("A franchise", "france")
    assert not contains_answer("Grandstand", "stand")
    assert not contains_answer("anything", "")


def test_rows_describe_each_query_and_slot(rows, batch_and_output):
    batch, output = batch_and_output
    assert len(rows) == 2
    assert [r["gold"] for r in rows] == [a for _, a in QUERIES]
    assert rows[0]["query"].startswith("paris is the capital of [MASK]")
    assert not any(t in r["query"] for r in rows for t in ("[CLS]", "[SEP]", "[PAD]"))
    assert rows[0]["prediction"] == "france" and rows[0]["correct"]
    assert not rows[1]["correct"]
    assert rows[0]["step"] == 6 and rows[0]["index_version"] == 4 and rows[0]["staleness"] == 2
    assert [r["example_id"] for r in rows] == [10, 11]
    for b, row in enumerate(rows):
        slots = row["slots"]
        assert len(slots) == 4
        assert slots[0]["title"] == NULL_TITLE and slots[0]["block_id"] == -1 and not slots[0]["has_gold"]
        assert math.isclose(sum(s["p_z"] for s in slots), 1.0, rel_tol=1e-5)
        for k, slot in enumerate(slots):
            mask = batch.target_mask[b].float()
            expected = math.exp(float((output.token_log_probs[b, k] * mask).sum()))
            assert math.isclose(slot["p_y"], expected, rel_tol=1e-5)
    assert [s["title"] for s in rows[0]["slots"]] == [NULL_TITLE, "France", "Germany", EMPTY_TITLE]
    assert rows[0]["slots"][3]["p_z"] < 1e-6
    assert [s["has_gold"] for s in rows[0]["slots"]] == [False, True, False, False]
    assert [s["title"] for s in rows[1]["slots"]] == [NULL_TITLE, "Germany", "Franchise", "France"]
    assert [s["has_gold"] for s in rows[1]["slots"]] == [False, True, False, False]
    assert rows[0]["slots"][1]["snippet"] == BLOCKS[0][1][:120]


def test_max_rows_and_flattening(batch_and_output, store, tokenizer, rows):
    batch, output = batch_and_output
    one = retrieval_rows(batch, output, store, tokenizer, index_version=0, staleness=0, step=1, max_rows=1)
    assert len(one) == 1
    flat = flatten_row(rows[0])
    assert "slots" not in flat
    assert flat["slot0_title"] == NULL_TITLE and flat["slot1_has_gold"] is True
    assert {f"slot3_{f}" for f in ("title", "snippet", "p_z", "p_y", "has_gold")} <= set(flat)
    json.dumps(rows)  # plain python values only


def test_log_retrieval_table_without_trackers_appends_jsonl(rows, tmp_path):
    class _Acc:
        is_main_process = True
        trackers = []

    log_retrieval_table(_Acc(), rows, step=6, run_dir=tmp_path)
    log_retrieval_table(_Acc(), rows[:1], step=7, run_dir=tmp_path)
    lines = (tmp_path / RETRIEVALS_FILE).read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[0])["slots"][1]["title"] == "France"
    assert init_builder_run(TrackingConfig(report_to="none"), tmp_path) is None


PREDICTIONS = [
    {"question": "Who wrote Hamlet?", "answers": ["Shakespeare", "William Shakespeare"], "prediction": "shakespeare",
     "correct": True, "prediction_block": 7, "block_ids": [7, 3], "titles": ["Hamlet", "Macbeth"], "scores": [3.5, 1.25],
     "has_answer": [True, False]},
    {"question": "Where?", "answers": ["Paris"], "prediction": "", "correct": False, "prediction_block": -1,
     "block_ids": [], "titles": [], "scores": [], "has_answer": []},
]  # fmt: skip
"""Two records as ``realm.qa.evaluation.evaluate_qa`` writes them (the second retrieved nothing)."""


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
    finally:
        accelerator.end_training()
        import wandb

        wandb.teardown()

    assert attempts == []
    offline_runs = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline_runs) == 2
    (offline,) = [r for r in offline_runs if (r / "files" / "media").exists()]
    tables = [json.loads(p.read_text()) for p in (offline / "files" / "media" / "table").rglob("*.table.json")]
    assert len(tables) == 2
    (table,) = [t for t in tables if "question" not in t["columns"]]
    assert table["columns"] == list(flatten_row(rows[0]))
    assert len(table["data"]) == len(rows)
    (predictions,) = [t for t in tables if "question" in t["columns"]]
    assert predictions["columns"][:5] == ["question", "answers", "prediction", "correct", "prediction_title"]
    assert predictions["columns"][5:8] == ["block0_title", "block0_score", "block0_has_answer"]
    assert predictions["data"][0][:5] == [
        "Who wrote Hamlet?",
        "Shakespeare | William Shakespeare",
        "shakespeare",
        True,
        "Hamlet",
    ]
    assert predictions["data"][0][5:11] == ["Hamlet", 3.5, True, "Macbeth", 1.25, False]
    assert predictions["data"][1][2] == "" and predictions["data"][1][4] == ""  # no span predicted
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
