"""``bench/real_open_qa.py`` runs every stage at its own config's length, where ``realm real-text``'s default cuts
them to fit 30 minutes on 2 cores: the bench's figures and the default's cost are of different runs, each named."""

from __future__ import annotations

import dataclasses

from realm.core.config import load_config, read_yaml
from realm.pipeline.real_text import RealTextConfig
from tests.helpers import ROOT, bench_module

real_open_qa = bench_module("real_open_qa")


def _config_steps(path: str) -> int:
    return read_yaml(ROOT / path)["train"]["max_steps"]


def test_the_default_cuts_every_trained_stage_and_the_bench_restores_each_configs_own_length(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    default = load_config(RealTextConfig, ROOT / "configs/real_text/default.yaml")
    lengths = {"warmup": default.warm_start.warmup_steps, "ict": default.warm_start.ict_steps,
               "pretrain": default.pretrain_steps, "finetune": default.qa_steps}  # fmt: skip
    full = {"warmup": _config_steps(default.warm_start.warmup_config),
            "ict": _config_steps(default.warm_start.ict_config),
            "pretrain": _config_steps(default.pretrain_config), "finetune": _config_steps(default.finetune_config)}
    assert all(0 < lengths[stage] < full[stage] for stage in full), (lengths, full)

    bench = real_open_qa.pipeline_config("scratch", 1, tmp_path, [])
    assert (bench.warm_start.warmup_steps, bench.warm_start.ict_steps, bench.pretrain_steps, bench.qa_steps) == (
        None, None, None, None)  # None: the stage config's own max_steps
    assert bench.warm_start.copy_curriculum == default.warm_start.copy_curriculum and bench.seed == 1
    assert bench.out == str(tmp_path / "scratch" / "seed1")
    # an explicit --set still wins over the full lengths, and a --set in the same section keeps them
    assert real_open_qa.pipeline_config("scratch", 0, tmp_path, ["--pretrain_steps=7"]).pretrain_steps == 7
    mixed = real_open_qa.pipeline_config("scratch", 0, tmp_path, ["--warm_start.ict_steps=9"]).warm_start
    assert (mixed.warmup_steps, mixed.ict_steps) == (None, 9)


def test_gpu_takes_the_gpu_configs_pretraining_overrides_for_every_init_and_nothing_else(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    plain = real_open_qa.pipeline_config("scratch", 0, tmp_path, [])
    gpu = real_open_qa.pipeline_config("scratch", 0, tmp_path, [], gpu=True)
    assert not plain.pretrain_overrides
    assert gpu.pretrain_overrides == read_yaml(ROOT / "configs/real_text/gpu.yaml")["pretrain_overrides"]
    assert gpu.pretrain_overrides["refresh"]["builder_devices"] == "0"
    assert dataclasses.replace(gpu, pretrain_overrides=plain.pretrain_overrides) == plain


def test_a_users_pretraining_overrides_beside_gpu_are_merged_key_by_key_and_win(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    gpu_config = read_yaml(ROOT / "configs/real_text/gpu.yaml")["pretrain_overrides"]
    extra = ["--pretrain_overrides.refresh.builder_devices=1", "--pretrain_overrides.train.log_every=3"]
    both = real_open_qa.pipeline_config("scratch", 0, tmp_path, extra, gpu=True).pretrain_overrides
    assert both["refresh"]["builder_devices"] == 1 and both["train"]["log_every"] == 3  # the user's values win
    others = {k: v for k, v in gpu_config["refresh"].items() if k != "builder_devices"}
    assert {k: both["refresh"][k] for k in others} == others  # and the GPU config's other keys stay
    assert both["train"]["prefetch_candidates"] is True
