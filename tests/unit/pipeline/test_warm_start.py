"""The warm start shared by the pipelines: which stages run, what each starts from, and what each is given."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline import warm_start as ws
from realm.core.config import load_config
from tests.helpers import ROOT
from warmstart.reader import WarmupConfig, WarmupTask


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
