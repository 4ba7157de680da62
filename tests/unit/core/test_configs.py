"""Every YAML in configs/ builds its dataclass tree; unknown keys and wrong types are errors that name the key."""


import pytest

from finetune.train import FinetuneConfig
from index_builder.build import IndexBuilderConfig
from realm.core.config import load_config, parse_overrides
from realm.core.errors import ConfigError
from realm.pretrain.config import PretrainConfig
from tests.helpers import ROOT
from warmstart.ict import ICTConfig
from warmstart.reader import WarmupConfig

CONFIGS = ROOT / "configs"
SCHEMAS = {
    "pretrain": PretrainConfig,
    "ict": ICTConfig,
    "index": IndexBuilderConfig,
    "finetune": FinetuneConfig,
    "warmup": WarmupConfig,
}


def _all_configs():
    return sorted(p for p in CONFIGS.rglob("*.yaml") if p.parent.name in SCHEMAS)


def test_every_config_folder_has_a_schema():
    folders = {p.parent.name for p in CONFIGS.rglob("*.yaml") if p.parent.parent == CONFIGS}
    assert folders <= set(SCHEMAS), f"config folders without a schema: {folders - set(SCHEMAS)}"


@pytest.mark.parametrize("path", _all_configs(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_config_loads_and_validates(path):
    cfg = load_config(SCHEMAS[path.parent.name], path)
    assert cfg is not None


def test_unknown_key_is_an_error_naming_it(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  max_step: 10\n")
    with pytest.raises(ConfigError, match=r"bad.yaml.train: unknown key\(s\) \['max_step'\]"):
        load_config(PretrainConfig, bad)


def test_unknown_override_is_an_error():
    with pytest.raises(ConfigError, match="unknown key"):
        load_config(PretrainConfig, CONFIGS / "pretrain/tiny.yaml", ["--optim.learning_rate=1e-4"])


def test_type_mismatch_is_an_error_naming_the_key():
    with pytest.raises(ConfigError, match=r"train.max_steps: expected an integer"):
        load_config(PretrainConfig, None, {"train": {"max_steps": "many"}})


def test_validation_errors_name_the_section():
    with pytest.raises(ConfigError, match="retriever.*num_candidates"):
        load_config(PretrainConfig, None, ["--retriever.num_candidates=1"])


def test_overrides_are_dotted_and_typed():
    assert parse_overrides(["--optim.lr=2e-3", "--train.max_steps", "7", "--refresh.spawn_builder=true"]) == {
        "optim": {"lr": 0.002},
        "train": {"max_steps": 7},
        "refresh": {"spawn_builder": True},
    }
    with pytest.raises(ConfigError, match="expected --section.key=value"):
        parse_overrides(["max_steps=3"])
    cfg = load_config(PretrainConfig, CONFIGS / "pretrain/tiny.yaml", ["--optim.lr=2e-3", "--train.max_steps=7"])
    assert cfg.optim.lr == 0.002 and cfg.train.max_steps == 7


def test_warm_start_and_explicit_resume_cannot_both_be_set():
    with pytest.raises(ConfigError, match="cannot both be set"):
        load_config(PretrainConfig, None, ["--train.resume=/x/step-00000010", "--train.init_retriever=/y"])


def test_a_partly_given_section_keeps_the_parents_defaults_for_the_rest():
    # fine-tuning defaults its optimizer to lr 1e-5 with 100 warm-up steps, unlike pre-training's OptimConfig()
    default = load_config(FinetuneConfig).optim
    partial = load_config(FinetuneConfig, overrides=["--optim.lr=0.001"]).optim
    assert (default.lr, default.warmup_steps) == (1e-5, 100)
    assert (partial.lr, partial.warmup_steps) == (0.001, 100)
    assert load_config(PretrainConfig, overrides=["--optim.lr=0.001"]).optim.warmup_steps == 10_000
