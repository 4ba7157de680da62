"""experiments/squad_open: every config a stage of the study names exists where the study looks for it and loads (the
study's configs moved into its folder once and its path was left behind; only running the study found it)."""

import pytest

from experiments.squad_open.squad_stages import CONFIGS, Encoder
from realm.core.config import load_config
from realm.finetune.train import FinetuneConfig
from realm.pretrain.config import PretrainConfig


@pytest.mark.parametrize("name", ["tiny", "minilm"])
def test_each_encoders_stage_configs_exist_and_load(name):
    encoder = Encoder(name=name, label=name, overrides=[], ict_steps=3, realm_steps=None)
    assert encoder.ict_config().train.max_steps == 3  # found and loaded, the command line's steps applied
    assert load_config(PretrainConfig, encoder.pretrain_file, []).train.max_steps > 0
    assert load_config(FinetuneConfig, CONFIGS / "finetune" / f"{name}.yaml", []).train.max_steps > 0
