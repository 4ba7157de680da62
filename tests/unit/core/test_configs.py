"""Every YAML in configs/ and in a study's configs/ (experiments/STUDY/configs/) builds its dataclass tree; unknown
keys and wrong types are errors that name the key."""


import pytest

from realm.core.config import load_config, parse_overrides
from realm.core.errors import ConfigError
from realm.finetune.train import FinetuneConfig
from realm.index_builder.watch import IndexBuilderConfig
from realm.pipeline.real_text import RealTextConfig
from realm.pretrain.config import PretrainConfig
from realm.warmstart.ict_train import ICTConfig
from realm.warmstart.warmup import WarmupConfig
from tests.helpers import ROOT

CONFIGS = ROOT / "configs"
SCHEMAS = {
    "pretrain": PretrainConfig,
    "ict": ICTConfig,
    "index": IndexBuilderConfig,
    "finetune": FinetuneConfig,
    "warmup": WarmupConfig,
    "real_text": RealTextConfig,
}


STUDY_CONFIGS = sorted((ROOT / "experiments").glob("*/configs/**/*.yaml"))
"""A study's configs, in folders named as configs/'s (``experiments/squad_open/configs/ict/tiny.yaml``)."""


def _all_configs():
    return sorted(p for p in [*CONFIGS.rglob("*.yaml"), *STUDY_CONFIGS] if p.parent.name in SCHEMAS)


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
    with pytest.raises(ConfigError, match=r"override train.max_steps='many': expected an integer"):
        load_config(PretrainConfig, None, {"train": {"max_steps": "many"}})


def test_an_error_names_the_override_or_the_file_the_bad_value_came_from(tmp_path):
    tiny = CONFIGS / "pretrain/tiny.yaml"
    cases = {
        ("--train.max_steps=many",): "override --train.max_steps=many: expected an integer, got 'many'",
        ("--train.max_steps", "-3"): "override --train.max_steps -3: max_steps must be >= 1, got -3",
        ("--optim.learning_rate=1",): "override --optim.learning_rate=1: unknown key(s) ['learning_rate']",
        ("--train=5",): "override --train=5: expected a section (a mapping), got 5",
        # a check that names no key: the section, and the overrides inside it
        ("--model.hidden_size=0",): f"{tiny}.model with override --model.hidden_size=0: model sizes must be positive",
    }
    for overrides, message in cases.items():
        with pytest.raises(ConfigError) as err:
            load_config(PretrainConfig, tiny, list(overrides))
        assert str(err.value).startswith(message), (overrides, str(err.value))
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  max_steps: -3\n  batch_size: many\n")
    with pytest.raises(ConfigError, match=rf"^{bad}.train.batch_size: expected an integer"):
        load_config(PretrainConfig, bad, ["--train.seed=1"])
    with pytest.raises(ConfigError, match=rf"^{bad}.train: max_steps must be >= 1, got -3"):
        load_config(PretrainConfig, bad, ["--train.batch_size=4"])


@pytest.mark.parametrize("cls", [PretrainConfig, ICTConfig, WarmupConfig])
@pytest.mark.parametrize("steps", [-3, 0])
def test_a_job_that_needs_a_step_says_so_for_any_max_steps_below_one(cls, steps):
    with pytest.raises(ConfigError, match=rf"max_steps must be >= 1, got {steps}"):
        load_config(cls, None, [f"--train.max_steps={steps}"])


def test_a_config_path_that_is_a_directory_says_so(tmp_path):
    with pytest.raises(ConfigError, match=rf"config file {tmp_path} is a directory, not a YAML file"):
        load_config(PretrainConfig, tmp_path)


def test_validation_errors_name_the_section():
    with pytest.raises(ConfigError, match="retriever.*num_candidates"):
        load_config(PretrainConfig, None, ["--retriever.num_candidates=1"])
    for bad, message in (("query_mask_prob=1.5", "query_mask_prob must be in"),
                         ("remove_prob=-0.1", "remove_prob must be in"),
                         ("query_mask_max_span=0", "query_mask_max_span must be >= 1")):  # fmt: skip
        with pytest.raises(ConfigError, match=f"ict.*{message}"):
            load_config(ICTConfig, None, [f"--ict.{bad}"])


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
