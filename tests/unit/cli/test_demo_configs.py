"""The demo's configs: one encoder shape in every stage, and the GPU demo config as the CPU one, larger."""

from __future__ import annotations

import dataclasses

from realm.core.config import load_config
from realm.pipeline.warm_start import SHAPE_KEYS, encoder_shape, stage_config
from realm.pretrain.config import PretrainConfig
from realm.warmstart.ict_train import ICTConfig
from realm.warmstart.warmup import WarmupConfig
from tests.helpers import ROOT

CONFIGS = ROOT / "configs"


def test_the_pretraining_configs_shape_reaches_the_warm_start_stages(tmp_path):
    cfg = load_config(PretrainConfig, CONFIGS / "pretrain/demo_gpu.yaml", ["--model.num_layers=6"])
    shape = encoder_shape(cfg.model)
    assert shape == {"hidden_size": 256, "num_layers": 6, "num_heads": 4, "intermediate_size": 1024}
    data = {"tokenizer": str(tmp_path / "tok"), "blocks": str(tmp_path / "blocks")}
    for cls, path, section in [(WarmupConfig, "warmup/demo.yaml", "warmup"), (ICTConfig, "ict/demo.yaml", "ict")]:
        stage = stage_config(cls, str(CONFIGS / path), tmp_path / section, 0, data, None, {"model": shape})
        assert {key: getattr(stage.model, key) for key in SHAPE_KEYS} == shape, section


def test_the_gpu_demo_differs_from_the_cpu_demo_only_in_shape_builder_placement_and_prefetch():
    cpu = dataclasses.asdict(load_config(PretrainConfig, CONFIGS / "pretrain/demo.yaml"))
    gpu = dataclasses.asdict(load_config(PretrainConfig, CONFIGS / "pretrain/demo_gpu.yaml"))
    assert {k: gpu["model"][k] for k in SHAPE_KEYS} != {k: cpu["model"][k] for k in SHAPE_KEYS}
    assert gpu["refresh"]["builder_devices"] and gpu["refresh"]["builder_precision"] == "bf16"
    assert gpu["train"]["prefetch_candidates"] and not cpu["train"]["prefetch_candidates"]
    for cfg in (cpu, gpu):
        for key in SHAPE_KEYS:
            del cfg["model"][key]
        del cfg["refresh"]["builder_devices"], cfg["refresh"]["builder_precision"], cfg["train"]["prefetch_candidates"]
    assert gpu == cpu  # note: so a recipe change to demo.yaml that is not made here fails, not drifts
