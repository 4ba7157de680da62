"""The warm start shared by the pipelines: which stages run, what each starts from, and what each is given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from realm.core.config import load_config
from realm.core.errors import ConfigError
from realm.data.blocks import build_blocks_from_config
from realm.data.corpus import CorpusConfig
from realm.data.vocab import train_wordpiece
from realm.pipeline import warm_start as ws
from realm.warmstart.warmup import WarmupConfig, WarmupTask
from tests.helpers import ROOT


@pytest.fixture
def seen(monkeypatch, tmp_path):
    seen = {}

    def warmup(cfg):
        seen["warmup"] = cfg
        return tmp_path / "warmup" / "encoder"

    def ict(cfg):
        seen["ict"] = cfg
        return tmp_path / "ict" / "retriever"

    monkeypatch.setattr(ws, "train_warmup", warmup)
    monkeypatch.setattr(ws, "train_ict", ict)
    return seen


DATA = {"tokenizer": "tok", "blocks": "blocks"}
CONFIGS = {"warmup_config": str(ROOT / "configs/real_text/warmup/default.yaml"),
           "ict_config": str(ROOT / "configs/real_text/ict/default.yaml")}  # fmt: skip


def test_from_scratch_ict_starts_from_the_warmed_up_encoder_with_the_stage_sections(seen, tmp_path):
    cfg = ws.WarmStartConfig(**CONFIGS, ict_steps=7, stage_overrides={
        "retriever": {"max_block_length": 64}, "tagging": {"kind": "rule"}})  # fmt: skip
    shape = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64}
    out = ws.warm_start(cfg, tmp_path, 3, DATA, shape)
    warmup, ict = seen["warmup"], seen["ict"]
    assert out.encoder == tmp_path / "warmup" / "encoder" and out.retriever == tmp_path / "ict" / "retriever"
    assert warmup.model.hidden_size == 32 and warmup.model.init_from is None and warmup.tagging.kind == "rule"
    assert ict.model.init_from == str(tmp_path / "warmup" / "encoder") and ict.train.max_steps == 7
    assert warmup.retriever.max_block_length == ict.retriever.max_block_length == 64
    assert warmup.train.seed == ict.train.seed == 3 and Path(ict.train.run_dir) == tmp_path / "ict"
    assert set(out.seconds) == {"warmup_s", "ict_s"}


def test_a_pretrained_folder_starts_both_stages_and_a_skipped_warmup_leaves_ict_alone(seen, tmp_path):
    ws.warm_start(ws.WarmStartConfig(**CONFIGS), tmp_path, 0, DATA, {"init_from": "minilm/"})
    assert seen["warmup"].model.init_from == "minilm/" and seen["ict"].model.init_from == "minilm/"
    seen.clear()
    out = ws.warm_start(ws.WarmStartConfig(**CONFIGS, warmup_steps=0), tmp_path, 0, DATA, {"hidden_size": 32})
    assert "warmup" not in seen and out.encoder is None and seen["ict"].model.init_from is None


def test_both_stages_skip_the_held_out_articles_the_pipeline_names(seen, tmp_path):
    data = {**DATA, "heldout_articles": "run/cloze/heldout_articles.txt"}
    ws.warm_start(ws.WarmStartConfig(**CONFIGS), tmp_path, 0, data, {"hidden_size": 32})
    assert seen["warmup"].data.heldout_articles == seen["ict"].data.heldout_articles == data["heldout_articles"]


def test_steps_below_zero_or_no_ict_are_refused():
    with pytest.raises(ValueError, match="warmup_steps must be >= 0"):
        ws.WarmStartConfig(warmup_steps=-1)
    with pytest.raises(ValueError, match="ict_steps must be at least 1"):
        ws.WarmStartConfig(ict_steps=0)


def test_the_warmup_masks_salient_spans_or_random_wordpieces_and_nothing_else():
    assert load_config(WarmupConfig, None, {"task": {"masking": "random_token"}}).task.masking == "random_token"
    with pytest.raises(ValueError, match="task.masking must be 'salient' or 'random_token'"):
        WarmupTask(masking="random_span")
    with pytest.raises(ValueError, match="task.masking does not apply"):
        WarmupTask(closed_book=True, sentences="x.jsonl", masking="random_token")


def _real_data(tmp_path: Path) -> dict[str, str]:
    """A tiny WordPiece vocabulary and the blocks of a ten-document corpus in it."""
    texts = [f"Paris is the capital city of France number {i}. The river Seine runs through it." for i in range(10)]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": str(i), "title": "t", "text": t}) + "\n" for i, t in enumerate(texts)))
    tokenizer = train_wordpiece(texts, 120, tmp_path / "tok")
    blocks = build_blocks_from_config(CorpusConfig(path=str(corpus), max_block_length=32, max_title_length=4),
                                      tokenizer, tmp_path / "b")
    return {"tokenizer": str(tmp_path / "tok"), "blocks": str(blocks)}


def test_the_copy_curriculum_chains_its_stages_into_the_reader_warmup(monkeypatch, tmp_path):
    runs = []

    def warmup(cfg):  # each stage publishes RUN/encoder
        runs.append(cfg)
        return Path(cfg.train.run_dir) / "encoder"

    monkeypatch.setattr(ws, "train_warmup", warmup)
    monkeypatch.setattr(ws, "train_ict", lambda cfg: runs.append(cfg) or tmp_path / "ict" / "retriever")
    data = {**_real_data(tmp_path), "heldout_articles": str(tmp_path / "heldout_articles.txt")}
    cfg = ws.WarmStartConfig(**CONFIGS, copy_sentences=30, copy_curriculum=[
        ws.CopyStage(words=3, steps=5), ws.CopyStage(words=0, steps=10, sentences=3, block_length=48)],
        stage_overrides={"retriever": {"max_block_length": 64}, "tagging": {"kind": "spacy"}})  # fmt: skip
    out = ws.warm_start(cfg, tmp_path / "run", 1, data, {"hidden_size": 32, "num_layers": 1})
    first, second, reader, ict = runs
    assert [Path(r.train.run_dir).name for r in runs] == ["0_words_3", "1_words_all", "warmup", "ict"]
    # the copy stages: random wordpieces masked over copy blocks of their own lengths, from scratch then chained
    for stage, steps, block_length in ((first, 5, 32), (second, 10, 48)):
        assert stage.task.masking == "random_token" and stage.tagging.kind == "rule"
        assert stage.train.max_steps == steps and stage.optim.decay_steps == max(1, steps // 5)
        assert (stage.retriever.max_query_length, stage.retriever.max_block_length) == (24, block_length)
        assert stage.data.tokenizer == data["tokenizer"] and stage.data.blocks != data["blocks"]
        assert stage.data.heldout_articles == ""  # random words of its own corpus: no article to hold out
    assert first.model.init_from is None and first.model.hidden_size == 32
    assert second.model.init_from == str(Path(first.train.run_dir) / "encoder")
    words = {w for line in (Path(first.train.run_dir) / "corpus.jsonl").read_text().splitlines()
             for w in json.loads(line)["text"].removesuffix(".").split()}  # fmt: skip
    assert len(words) == 3 and words <= {"the", "paris", "is", "capital", "city", "of", "france", "number"}
    # the last stage's 30 sentences come three a block
    lines = (Path(second.train.run_dir) / "corpus.jsonl").read_text().splitlines()
    texts = [json.loads(line)["text"] for line in lines]
    assert len(texts) == 10 and all(text.count(".") == 3 for text in texts)
    # the reader warm-up starts from the last copy encoder, on the pipeline's data and lengths; ICT from the warm-up
    assert reader.model.init_from == str(out.copied) == str(Path(second.train.run_dir) / "encoder")
    assert reader.task.masking == "salient" and reader.tagging.kind == "spacy" and reader.data.blocks == data["blocks"]
    assert reader.retriever.max_block_length == 64 and ict.model.init_from == str(out.encoder)
    assert reader.data.heldout_articles == ict.data.heldout_articles == data["heldout_articles"]
    assert set(out.seconds) == {"copy_s", "warmup_s", "ict_s"}


def test_a_copy_curriculum_needs_a_from_scratch_encoder_and_the_reader_warmup(tmp_path):
    with pytest.raises(ValueError, match="needs the reader warm-up after it"):
        ws.WarmStartConfig(warmup_steps=0, copy_curriculum=[ws.CopyStage(words=10, steps=1)])
    with pytest.raises(ValueError, match="words >= 0, steps >= 1 and sentences >= 1"):
        ws.CopyStage(words=10, steps=0)
    cfg = ws.WarmStartConfig(**CONFIGS, copy_curriculum=[ws.CopyStage(words=10, steps=1)])
    with pytest.raises(ValueError, match="for an encoder from scratch"):
        ws.warm_start(cfg, tmp_path, 0, DATA, {"init_from": "minilm/"})


def test_a_copy_stage_asking_for_more_words_than_the_corpus_has_is_refused_before_any_stage_runs(monkeypatch, tmp_path):
    monkeypatch.setattr(ws, "train_warmup", lambda cfg: pytest.fail("a stage ran"))
    data = _real_data(tmp_path)
    stages = [ws.CopyStage(words=3, steps=1), ws.CopyStage(words=999, steps=1)]
    cfg = ws.WarmStartConfig(**CONFIGS, copy_curriculum=stages)
    with pytest.raises(ConfigError, match=r"copy_curriculum\[1\] asks for 999 words, but the blocks at .* have only"):
        ws.warm_start(cfg, tmp_path / "run", 0, data, {"hidden_size": 32, "num_layers": 1})
    assert not (tmp_path / "run" / "copy").exists()
