"""The demo's pipeline over its typed config: what each stage is given, in what order, and what the summary holds.
The stages themselves are stubbed (their own tests and the demo's integration test run them)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from realm.pipeline import demo, layout
from realm.pipeline.warm_start import WarmStartConfig
from realm.run.layout import SUMMARY_FILE
from tests.helpers import ROOT

CONFIGS = {"pretrain_config": str(ROOT / "configs/pretrain/demo.yaml"),
           "finetune_config": str(ROOT / "configs/finetune/demo.yaml")}  # fmt: skip
WARM = {"warmup_config": str(ROOT / "configs/warmup/demo.yaml"), "ict_config": str(ROOT / "configs/ict/demo.yaml")}
WORLD_FILES = ("corpus", "pretrain", "heldout", "questions_train", "questions_heldout")


def _paths(run: Path) -> dict[str, Path]:
    return {**{name: layout.world_file(run, name) for name in WORLD_FILES},
            "heldout_articles": layout.world_dir(run) / "heldout_articles.txt",
            "tokenizer": layout.tokenizer_dir(run), "blocks": layout.blocks_dir(run)}  # fmt: skip


@pytest.fixture
def seen(monkeypatch):
    """Stubs every stage of ``run_demo``; records what each was given."""
    seen: dict = {}
    metrics = SimpleNamespace(span_accuracy=0.5, closed_book_span_accuracy=0.1, token_accuracy=0.6,
                              closed_book_token_accuracy=0.2, gold_recall_at_k=0.9, gold_recall_at_1=0.7, k=4,
                              num_examples=3)  # fmt: skip

    def world(run, seed, num_entities, vocab_size, max_block_length):
        seen["world"] = (seed, num_entities, vocab_size, max_block_length)
        return _paths(Path(run))

    def warm(cfg, out, seed, data, model):
        seen["warm"] = (cfg, model, data)
        return SimpleNamespace(seconds={"warmup_s": 1.0, "ict_s": 1.0})

    def pretrain(cfg):
        seen["pretrain"] = cfg
        train = {"num_index_refreshes": 2, "trainer_wait_fraction": 0.01, "step": cfg.train.max_steps}
        return SimpleNamespace(start=metrics, end=metrics, train=train, seconds={"pretrain_s": 1.0})

    def finetune(cfg):
        seen["finetune"] = cfg
        return {"qa_exact_match_start": 0.0, "qa_exact_match_end": 0.3}

    monkeypatch.setattr(demo, "make_world_data", world)
    monkeypatch.setattr(demo, "warm_start", warm)
    monkeypatch.setattr(demo, "pretrain_and_evaluate", pretrain)
    monkeypatch.setattr(demo, "finetune_and_evaluate", finetune)
    return seen


def test_pretraining_starts_from_both_warm_starts_and_the_users_overrides_come_last(tmp_path):
    cfg = demo.DemoConfig(out=str(tmp_path), seed=3, pretrain_steps=7, **CONFIGS, warm_start=WarmStartConfig(**WARM),
                          pretrain_overrides={"train": {"max_steps": 9}, "model": {"num_layers": 3}})  # fmt: skip
    pretrain = demo.pretrain_config(cfg, _paths(tmp_path))
    assert pretrain.train.max_steps == 9 and pretrain.model.num_layers == 3 and pretrain.train.seed == 3
    assert pretrain.train.init_encoder == str(layout.warmup_encoder(tmp_path))
    assert pretrain.train.init_retriever == str(layout.ict_retriever(tmp_path))
    assert pretrain.data.sentences == str(layout.world_file(tmp_path, "pretrain"))
    skipped = demo.DemoConfig(out=str(tmp_path), **CONFIGS, warm_start=WarmStartConfig(**WARM, warmup_steps=0))
    assert demo.pretrain_config(skipped, _paths(tmp_path)).train.init_encoder == ""


def test_qa_fine_tunes_the_pretrained_run_on_training_entities_and_evaluates_held_out_ones(tmp_path):
    cfg = demo.DemoConfig(out=str(tmp_path), seed=2, qa_steps=5, max_dev_questions=0, num_threads=1, **CONFIGS)
    qa = demo.finetune_config(cfg, _paths(tmp_path))
    assert qa.init.run == str(tmp_path) and qa.train.run_dir == str(layout.qa_run(tmp_path)) and qa.train.max_steps == 5
    assert qa.task.train == str(layout.world_file(tmp_path, "questions_train")) and qa.task.max_dev_questions == 0
    assert qa.train.num_threads == 1 and qa.train.seed == 2


def test_the_demo_runs_its_stages_in_the_pretraining_shape_and_writes_the_summary(seen, tmp_path):
    cfg = demo.DemoConfig(out=str(tmp_path / "run"), num_entities=50, vocab_size=500, pretrain_steps=4, **CONFIGS,
                          warm_start=WarmStartConfig(**WARM),
                          pretrain_overrides={"model": {"num_layers": 3}})  # fmt: skip
    summary = demo.run_demo(cfg)
    assert seen["world"][:3] == (0, 50, 500) and seen["warm"][1]["num_layers"] == 3
    assert seen["pretrain"].train.max_steps == 4 and "finetune" in seen
    # by default the reader warm-up and ICT read every article (DemoConfig.warm_start_reads_heldout)
    assert "heldout_articles" not in seen["warm"][2]
    assert summary["qa_exact_match_end"] == 0.3 and summary["pretrain_steps"] == 4
    assert list(summary["stage_seconds"]) == ["data_s", "warmup_s", "ict_s", "pretrain_s", "qa_s"]
    assert json.loads((tmp_path / "run" / SUMMARY_FILE).read_text())["heldout_accuracy_retrieval"] == 0.5


def test_no_qa_steps_skips_fine_tuning(seen, tmp_path):
    cfg = demo.DemoConfig(out=str(tmp_path), qa_steps=0, **CONFIGS, warm_start=WarmStartConfig(**WARM))
    assert "qa_exact_match_end" not in demo.run_demo(cfg) and "finetune" not in seen


def test_a_clean_warm_start_skips_the_held_out_entities_articles(seen, tmp_path):
    cfg = demo.DemoConfig(out=str(tmp_path / "run"), num_entities=50, vocab_size=500, pretrain_steps=4, **CONFIGS,
                          warm_start=WarmStartConfig(**WARM), warm_start_reads_heldout=False)  # fmt: skip
    demo.run_demo(cfg)
    assert seen["warm"][2]["heldout_articles"] == str(tmp_path / "run" / "world" / "heldout_articles.txt")


def test_realm_demo_clean_warm_start_flag_turns_the_held_out_articles_off():
    from realm.cli.demo import demo_config

    assert demo_config([]).warm_start_reads_heldout
    assert not demo_config(["--clean-warm-start"]).warm_start_reads_heldout  # the deprecated flag, for one release
    assert not demo_config(["--warm_start_reads_heldout=false"]).warm_start_reads_heldout
