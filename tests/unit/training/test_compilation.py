"""``train.compile``: off by default, given to every stage by the pipelines, and refused in one line where inductor
cannot compile."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from realm.core.config import load_config, to_dict
from realm.core.errors import ConfigError


def test_compile_is_off_by_default_in_every_training_job():
    from realm.finetune.train import FinetuneConfig
    from realm.pretrain.config import PretrainConfig
    from realm.warmstart.ict_train import ICTConfig
    from realm.warmstart.warmup import WarmupConfig

    for cls in (PretrainConfig, FinetuneConfig, ICTConfig, WarmupConfig):
        assert to_dict(cls())["train"]["compile"] is False, cls
    assert load_config(ICTConfig, overrides=["--train.compile=true"]).train.compile is True


def test_the_pipelines_give_every_stage_compile(tmp_path):
    from realm.pipeline import real_text
    from realm.pipeline.demo import DemoConfig, finetune_config, pretrain_config
    from realm.pipeline.warm_start import stage_config
    from realm.warmstart.ict_train import ICTConfig

    paths = {name: tmp_path / name for name in ("tokenizer", "blocks", "pretrain", "heldout", "questions_train",
                                                "questions_heldout")}  # fmt: skip
    for compile in (True, False):
        cfg = DemoConfig(out=str(tmp_path), compile=compile)
        assert pretrain_config(cfg, paths).train.compile is compile
        assert finetune_config(cfg, paths).train.compile is compile
        ict = stage_config(ICTConfig, cfg.warm_start.ict_config, tmp_path / "ict", 0, {}, 1, {}, "fp32", compile)
        assert ict.train.compile is compile
    # a --train.compile of the command line (a pre-training override) is what the pipelines then pass to every stage
    demo = DemoConfig(out=str(tmp_path), pretrain_overrides={"train": {"compile": True}})
    assert pretrain_config(demo, paths).train.compile is True
    sets = SimpleNamespace(pretrain=tmp_path / "x.jsonl", heldout=tmp_path / "heldout.jsonl")  # what it reads
    text = real_text.RealTextConfig(out=str(tmp_path), pretrain_overrides={"train": {"compile": True}})
    assert real_text.pretrain_config(text, {}, sets, warmed=False).train.compile is True
    text = real_text.RealTextConfig(out=str(tmp_path), compile=True)
    assert real_text.finetune_config(text).train.compile is True


def test_a_machine_inductor_cannot_compile_on_is_refused_in_one_line():
    import torch._dynamo
    import torch._inductor.config as inductor_config

    from realm.training.compilation import check_compiler

    check_compiler.cache_clear()
    torch._dynamo.reset()
    # note: the config module's own patch, not monkeypatch: monkeypatch's undo deletes the attribute from inductor's
    # config module, and every later compile in the same process then fails ("cpp.cxx does not exist")
    try:
        with inductor_config.patch({"cpp.cxx": ("/nonexistent/c++",)}):
            with pytest.raises(ConfigError, match=r"train.compile=true.*cannot compile on this cpu machine") as err:
                check_compiler("cpu")
        assert "\n" not in str(err.value) and "C++ compiler" in str(err.value)
    finally:
        check_compiler.cache_clear()
        torch._dynamo.reset()
