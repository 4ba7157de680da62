"""Every float of every config is a finite number: NaN and infinities are refused where the config is built, naming
the key, whether they come from a YAML file (``.nan``, ``.inf``) or an override (``=nan``, ``=inf``, ``=1e999``)."""

from __future__ import annotations

import pytest

import realm.trainer.pretrain  # noqa: F401 - imported at collection, so the test times the command, not the imports
from realm.cli.main import main
from realm.core.config import load_config
from realm.core.errors import ConfigError
from realm.finetune.train import FinetuneConfig
from realm.pretrain.config import PretrainConfig


@pytest.mark.parametrize("raw", ["nan", "NaN", ".nan", "inf", "-inf", ".inf", "1e999", "-1e999"])
def test_a_non_finite_override_is_refused_naming_it(raw):
    with pytest.raises(ConfigError) as err:
        load_config(PretrainConfig, None, [f"--optim.lr={raw}"])
    assert str(err.value).startswith(f"override --optim.lr={raw}: ")
    assert str(err.value).endswith("is not a finite number")


@pytest.mark.parametrize("raw", [".nan", ".NaN", ".inf", "-.inf", "1.0e+999"])
def test_a_non_finite_yaml_value_is_refused_naming_the_file_and_key(tmp_path, raw):
    path = tmp_path / "bad.yaml"
    path.write_text(f"optim:\n  max_grad_norm: {raw}\n")
    with pytest.raises(ConfigError, match=rf"^{path}\.optim\.max_grad_norm: .* is not a finite number$"):
        load_config(PretrainConfig, path)


def test_every_section_of_every_job_is_checked_floats_inside_lists_included():
    with pytest.raises(ConfigError, match=r"--optim.betas=\[0.9, .nan\]: nan is not a finite number"):
        load_config(FinetuneConfig, None, ["--optim.betas=[0.9, .nan]"])
    with pytest.raises(ConfigError, match="--retriever.score_scale=inf: inf is not a finite number"):
        load_config(PretrainConfig, None, ["--retriever.score_scale=inf"])


def test_finite_floats_still_load():
    cfg = load_config(PretrainConfig, None, ["--optim.lr=1e-4", "--optim.max_grad_norm=0"])
    assert cfg.optim.lr == 1e-4 and cfg.optim.max_grad_norm == 0.0


def test_realm_train_refuses_a_nan_learning_rate_in_one_line(tmp_path, capsys):
    """It was torch's ``ValueError: Invalid learning rate: nan`` as a traceback, after the inputs were loaded."""
    argv = ["train", "--config", "configs/pretrain/tiny.yaml", f"--train.run_dir={tmp_path / 'run'}", "--optim.lr=nan"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == "realm train: error: override --optim.lr=nan: nan is not a finite number\n"
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("argv", [["--train.run_dir=nan"], ["--train.run_dir=2024"], ["--train.run_dir", "1e3"],
                                  ["--tracking.run_name=true"]])  # fmt: skip
def test_a_string_field_takes_an_overrides_text_as_typed_even_when_it_reads_as_a_number(argv):
    """A run directory named ``nan`` broke the child builder (its ``--tracking.run_name=nan`` became a float)."""
    cfg = load_config(PretrainConfig, None, argv)
    key, value = (argv[0].removeprefix("--").split("=") + argv[1:])[:2]
    section, name = key.split(".")
    assert getattr(getattr(cfg, section), name) == value
