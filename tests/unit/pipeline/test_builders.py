"""What the demo and the real-text pipelines build alike (``realm.pipeline.builders``): their QA configs from one
builder, the pre-training config loaded once a run, each pipeline's own order of overrides kept."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest

import realm.core.config
from realm.data.cloze_sets import ClozeSets
from realm.pipeline import demo, layout, real_text
from realm.pretrain.config import PretrainConfig

WORLD = ("pretrain", "heldout", "questions_train", "questions_heldout")


def _world(out: Path) -> dict[str, Path]:
    return {**{name: layout.world_file(out, name) for name in WORLD}, "tokenizer": layout.tokenizer_dir(out),
            "blocks": layout.blocks_dir(out), "heldout_articles": layout.world_dir(out) / "heldout_articles.txt"}


def _sets(out: Path) -> ClozeSets:
    return ClozeSets(layout.cloze_file(out, "pretrain"), layout.cloze_file(out, "heldout"), 1, 1, 0, 0,
                     layout.heldout_articles(out))  # fmt: skip


def _real_text(out: Path, **kwargs) -> real_text.RealTextConfig:
    return real_text.RealTextConfig(out=str(out), qa=real_text.QAFiles(train="t.json", dev="d.json"), **kwargs)


def test_both_pipelines_fine_tune_the_pretrained_run_into_the_layouts_qa_folder(tmp_path):
    shared = {"seed": 2, "qa_steps": 5, "precision": "fp32", "compile": True}
    qa = {"demo": demo.finetune_config(demo.DemoConfig(out=str(tmp_path), num_threads=1, **shared), _world(tmp_path)),
          "real_text": real_text.finetune_config(_real_text(tmp_path, **shared))}
    for name, cfg in qa.items():
        assert (cfg.train.run_dir, cfg.init.run) == (str(layout.qa_run(tmp_path)), str(layout.pretrain_run(tmp_path)))
        assert (cfg.train.seed, cfg.train.max_steps, cfg.train.precision, cfg.train.compile) == (2, 5, "fp32", True)
    assert qa["demo"].train.num_threads == 1 and qa["demo"].task.train == str(layout.world_file(tmp_path, WORLD[2]))
    assert (qa["real_text"].task.train, qa["real_text"].task.dev) == ("t.json", "d.json")


def test_pretraining_starts_from_the_layouts_warm_starts_and_reads_the_data_stages_files(tmp_path):
    cfgs = {"demo": demo.pretrain_config(demo.DemoConfig(out=str(tmp_path)), _world(tmp_path)),
            "real_text": real_text.pretrain_config(_real_text(tmp_path), {"tokenizer": str(layout.tokenizer_dir(
                tmp_path)), "blocks": str(layout.blocks_dir(tmp_path))}, _sets(tmp_path), warmed=True)}  # fmt: skip
    for cfg in cfgs.values():
        assert cfg.train.run_dir == str(layout.pretrain_run(tmp_path))
        assert cfg.train.init_retriever == str(layout.ict_retriever(tmp_path))
        assert cfg.train.init_encoder == str(layout.warmup_encoder(tmp_path))
        assert (cfg.data.tokenizer, cfg.data.blocks) == (str(layout.tokenizer_dir(tmp_path)),
                                                         str(layout.blocks_dir(tmp_path)))  # fmt: skip
    assert cfgs["demo"].data.sentences == str(layout.world_file(tmp_path, "pretrain"))
    assert cfgs["real_text"].data.heldout == str(layout.cloze_file(tmp_path, "heldout"))


def test_the_demos_overrides_win_over_its_own_keys_and_real_texts_lose_to_them(tmp_path):
    """As before the pipelines shared their builders: ``realm demo --train.run_dir=X`` moves its pre-training run and
    a ``--data.blocks`` replaces the world's; ``realm real-text`` keeps its own folders (but for train.compile)."""
    mine = {"train": {"run_dir": str(tmp_path / "mine"), "compile": True}, "data": {"blocks": "my_blocks"}}
    cfg = demo.pretrain_config(demo.DemoConfig(out=str(tmp_path), pretrain_overrides=mine), _world(tmp_path))
    assert (cfg.train.run_dir, cfg.data.blocks, cfg.train.compile) == (str(tmp_path / "mine"), "my_blocks", True)
    assert cfg.data.tokenizer == str(layout.tokenizer_dir(tmp_path))
    text = _real_text(tmp_path, pretrain_overrides=mine)
    cfg = real_text.pretrain_config(text, {"tokenizer": "t", "blocks": "b"}, _sets(tmp_path), warmed=False)
    assert (cfg.train.run_dir, cfg.data.blocks, cfg.train.compile) == (str(tmp_path), "b", True)


@pytest.fixture
def loads(monkeypatch):
    """Counts the pre-training configs built from a file and overrides (``load_config``'s every call builds one)."""
    built = []
    build = realm.core.config._build

    def counting(cls, *args):
        built.append(cls) if cls is PretrainConfig else None
        return build(cls, *args)

    monkeypatch.setattr(realm.core.config, "_build", counting)
    return built


def _stub_stages(monkeypatch, module) -> None:
    metrics = SimpleNamespace(span_accuracy=0.5, closed_book_span_accuracy=0.1, token_accuracy=0.6,
                              closed_book_token_accuracy=0.2, gold_recall_at_k=0.9, gold_recall_at_1=0.7, k=4,
                              num_examples=3)  # fmt: skip
    train = {"num_index_refreshes": 1, "trainer_wait_fraction": 0.0, "step": 2}
    monkeypatch.setattr(module, "warm_start", lambda *args: SimpleNamespace(seconds={}))
    monkeypatch.setattr(module, "pretrain_and_evaluate", lambda cfg: SimpleNamespace(
        start=metrics, end=metrics, train=train, seconds={}))  # fmt: skip
    monkeypatch.setattr(module, "finetune_and_evaluate", lambda cfg: {"qa_exact_match_end": 0.25})


def test_each_pipeline_loads_its_pretraining_config_once(monkeypatch, loads, tmp_path):
    _stub_stages(monkeypatch, demo)
    _stub_stages(monkeypatch, real_text)
    monkeypatch.setattr(demo, "make_world_data", lambda run, *args: _world(run))
    summary = demo.run_demo(demo.DemoConfig(out=str(tmp_path / "demo")))
    assert loads == [PretrainConfig] and summary["qa_exact_match_end"] == 0.25
    loads.clear()
    data = {"tokenizer": "t", "blocks": "b"}
    monkeypatch.setattr(real_text, "prepare_data", lambda cfg, length: (data, _sets(Path(cfg.out)), {}))
    text = _real_text(tmp_path / "text", corpus=dataclasses.replace(real_text.RealTextConfig().corpus, path="c.jsonl"))
    summary = real_text.run_real_text(text)
    assert loads == [PretrainConfig] and summary["pretrain_steps"] == 2

