"""One CLI convention (issue 59 item 4): dotted ``--section.key=value`` for every command, ``-`` or ``_`` in keys,
``--help`` with each field's docstring and YAML default, ``--print_config``, did-you-mean for commands and keys."""

from __future__ import annotations


import pytest
import yaml

from realm.cli import demo as demo_cli
from realm.cli.main import main
from realm.core.config import from_dict, load_config, to_dict
from realm.pipeline.real_text import RealTextConfig
from realm.pretrain.config import PretrainConfig
from tests.unit.pipeline.test_demo import seen  # noqa: F401  (the fixture that stubs every stage of the demo)


def test_a_demo_configured_only_with_dotted_keys(seen, tmp_path):  # noqa: F811
    run = tmp_path / "run"
    argv = [f"--out={run}", "--num-entities=50", "--vocab_size", "500", "--warm_start.ict_steps=2",
            "--warm-start.warmup-steps=3", "--pretrain_steps=4", "--qa_steps=3", "--max_dev_questions=7",
            "--precision=fp32", "--seed=5", "--train.log_interval=2", "--tracking.run_name", "dotted"]  # fmt: skip
    assert demo_cli.main(argv) == 0
    assert seen["world"][:3] == (5, 50, 500)
    warm = seen["warm"][0]
    assert (warm.ict_steps, warm.warmup_steps, warm.precision) == (2, 3, "fp32")
    pretrain = seen["pretrain"]
    assert (pretrain.train.max_steps, pretrain.train.log_interval, pretrain.train.seed) == (4, 2, 5)
    assert pretrain.train.precision == "fp32" and pretrain.tracking.run_name == "dotted"
    qa = seen["finetune"]
    assert (qa.train.max_steps, qa.task.max_dev_questions, qa.train.precision) == (3, 7, "fp32")


def test_the_old_demo_flags_still_work_with_a_one_line_note(capsys):
    cfg = demo_cli.demo_config(["--entities", "64", "--steps=6", "--qa-steps", "2", "--ict-steps", "3",
                                "--config", "configs/pretrain/demo_gpu.yaml", "--refresh.swap_lag=1"])  # fmt: skip
    assert (cfg.num_entities, cfg.pretrain_steps, cfg.qa_steps, cfg.warm_start.ict_steps) == (64, 6, 2, 3)
    assert cfg.pretrain_config == "configs/pretrain/demo_gpu.yaml"
    assert cfg.pretrain_overrides == {"refresh": {"swap_lag": 1}}
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--entities -> --num_entities" in err[0] and "--config -> --pretrain_config" in err[0]


def test_the_demo_runs_of_the_tests_use_its_dotted_keys():
    """No deprecated flag (and its note) in the demo commands other tests and experiments/demo/precision_parity.py
    pass."""
    from tests.integration.cli.test_demo_learns import COMMAND
    from tests.integration.test_wheel import DEMO

    for argv in (COMMAND, DEMO):
        assert demo_cli.translate_deprecated(argv) == (argv, [])


def test_a_jobs_help_shows_field_docstrings_and_yaml_defaults(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["train", "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert "  --train.run_dir=runs/realm\n      The run directory shared with the index builder" in out
    assert "  --model.init_from=null\n" in out and "  --train.init_encoder=''\n" in out  # YAML, not repr
    assert "--print_config" in out


def test_real_text_help_shows_its_default_configs_values(capsys):
    with pytest.raises(SystemExit):
        main(["real-text", "--help"])
    out = capsys.readouterr().out
    assert "--corpus.path=../shared/data/real/wikipedia_vital10k/summaries_en-us.json\n" in out
    assert "--qa_steps=250\n      None: the config's; 0 skips QA." in out


@pytest.mark.parametrize("command, cls, config", [
    (["real-text", "--qa_steps=3", "--corpus.text-field=body"], RealTextConfig, "configs/real_text/default.yaml"),
    (["train", "--config", "configs/pretrain/tiny.yaml", "--train.max_steps=3"], PretrainConfig,
     "configs/pretrain/tiny.yaml"),
])  # fmt: skip
def test_print_config_prints_the_resolved_config_as_yaml(capsys, command, cls, config):
    with pytest.raises(SystemExit) as stop:
        main([*command, "--print_config"])
    assert stop.value.code == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    resolved = load_config(cls, config, [arg for arg in command[1:] if arg.startswith("--") and "=" in arg])
    assert from_dict(cls, printed) == resolved  # YAML has no tuples: optim.betas reads back as a list
    assert printed["train" if cls is PretrainConfig else "qa_steps"] == to_dict(resolved)["train" if cls is
                                                                                      PretrainConfig else "qa_steps"]


def test_print_config_of_the_demo_holds_its_pretraining_overrides(capsys):
    with pytest.raises(SystemExit):
        main(["demo", "--num_entities=9", "--train.max_steps=3", "--print_config"])
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["num_entities"] == 9 and printed["pretrain_overrides"] == {"train": {"max_steps": 3}}
    assert printed == to_dict(demo_cli.demo_config(["--num_entities=9", "--train.max_steps=3"]))


def test_real_text_takes_the_pretraining_sections_into_its_pretrain_overrides(capsys):
    """``realm real-text --tracking.*`` (any pre-training section) goes to ``pretrain_overrides``, a dict of sections,
    key by key: merged with the config's and a ``--pretrain_overrides={...}`` given too, a two-word value kept."""
    argv = ['--pretrain_overrides={"model": {"num_layers": 4}, "train": {"seed": 1}}', "--tracking.report_to=wandb",
            "--train.seed", "3", "--seed=2", "--config", "configs/real_text/gpu.yaml"]  # fmt: skip
    with pytest.raises(SystemExit):
        main(["real-text", *argv, "--print_config"])
    overrides = yaml.safe_load(capsys.readouterr().out)["pretrain_overrides"]
    assert overrides["tracking"] == {"report_to": "wandb"} and overrides["model"] == {"num_layers": 4}
    assert overrides["train"] == {"prefetch_candidates": True, "seed": 3}  # the config's key kept, the seed given last
    assert overrides["refresh"]["builder_devices"] == "0"


def test_a_mistyped_command_gets_one_did_you_mean_line(capsys):
    assert main(["trian"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["realm: unknown command 'trian' (did you mean 'train'?); `realm --help` lists the commands"]
    assert main(["knnlm", "tnue"]) == 2
    assert "(did you mean 'tune'?)" in capsys.readouterr().err


def test_a_mistyped_key_gets_one_did_you_mean_line(capsys):
    assert main(["train", "--config", "configs/pretrain/tiny.yaml", "--train.max_step=3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "override --train.max_step=3: unknown key(s) ['max_step'] (did you mean 'max_steps'?)" in err[0]
    assert main(["demo", "--num_entites=3"]) == 2
    assert "(did you mean 'num_entities'?)" in capsys.readouterr().err


def test_plain_option_commands_take_both_spellings_and_suggest(tmp_path, capsys):
    assert main(["world", "--out", str(tmp_path / "a"), "--entities", "12", "--heldout_fraction", "0.25"]) == 0
    assert main(["world", "--out", str(tmp_path / "b"), "--entities", "12", "--heldout-fraction=0.25"]) == 0
    assert (tmp_path / "a" / "entities.jsonl").read_text() == (tmp_path / "b" / "entities.jsonl").read_text()
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        main(["world", "--out", str(tmp_path / "c"), "--heldout-fractoin=0.3"])
    assert stop.value.code == 2
    assert "(did you mean '--heldout-fraction'?)" in capsys.readouterr().err


def test_the_demos_config_is_a_demo_yaml_or_the_old_pretraining_recipe(tmp_path, capsys):
    (tmp_path / "demo.yaml").write_text("num_entities: 77\nwarm_start:\n  ict_steps: 5\n")
    cfg = demo_cli.demo_config(["--config", str(tmp_path / "demo.yaml"), "--qa_steps=0"])
    assert (cfg.num_entities, cfg.warm_start.ict_steps, cfg.qa_steps) == (77, 5, 0)
    assert cfg.pretrain_config == "configs/pretrain/demo.yaml" and not capsys.readouterr().err  # nothing deprecated
