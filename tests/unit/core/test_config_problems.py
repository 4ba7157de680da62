"""A config is checked in one pass: every problem of every section in one ``ConfigError``, one line each, each line
naming where its value came from (``realm.core.checks`` and ``realm.core.config``)."""

from __future__ import annotations

import pickle

import pytest

from realm.cli.main import main
from realm.core.checks import ConfigProblems, Problems
from realm.core.config import load_config
from realm.core.errors import ConfigError
from realm.pretrain.config import EvalConfig, PretrainConfig, TrainConfig
from tests.helpers import ROOT

DEMO = ROOT / "configs/pretrain/demo.yaml"
THREE_WRONG = ["--train.max_steps=-3", "--eval.search=x", "--retriever.num_candidates=1"]
THREE_LINES = [
    "override --train.max_steps=-3: max_steps must be >= 1, got -3",
    "override --retriever.num_candidates=1: num_candidates must be >= 2 (null document + one retrieved), got 1",
    "override --eval.search=x: eval.search must be one of auto, exact, index, got 'x'",
]


def test_three_wrong_values_in_three_sections_are_one_error_with_a_line_each_naming_its_override():
    with pytest.raises(ConfigError) as err:
        load_config(PretrainConfig, DEMO, THREE_WRONG)
    assert str(err.value).splitlines() == ["the config has 3 problems:", *(f"  {line}" for line in THREE_LINES)]
    assert err.value.problems == THREE_LINES


def test_the_command_line_prints_every_problem_and_exits_2(capsys):
    assert main(["train", "--config", str(DEMO), *THREE_WRONG]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["realm train: error: the config has 3 problems:", *(f"  {line}" for line in THREE_LINES)]


def test_unknown_keys_wrong_types_and_bad_values_of_different_sections_are_gathered():
    overrides = ["--train.batch_size=many", "--optim.learning_rate=1", "--eval.search=x",
                 "--tracking.num_inspect_rows=0"]  # fmt: skip
    with pytest.raises(ConfigError) as err:
        load_config(PretrainConfig, DEMO, overrides)
    lines = err.value.problems
    assert len(lines) == 4, lines
    assert lines[0] == "override --train.batch_size=many: expected an integer, got 'many'"
    assert lines[1].startswith("override --optim.learning_rate=1: unknown key(s) ['learning_rate']")
    assert lines[2] == "override --eval.search=x: eval.search must be one of auto, exact, index, got 'x'"
    assert lines[3] == "override --tracking.num_inspect_rows=0: num_inspect_rows must be positive, got 0"


def test_two_problems_of_one_section_each_name_their_own_override_or_yaml_key(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(PretrainConfig, DEMO, ["--retriever.score=dot", "--retriever.embed_dim=0"])
    assert err.value.problems == [
        "override --retriever.embed_dim=0: embed_dim must be positive, got 0",
        "override --retriever.score=dot: score must be one of ('inner_product', 'cosine'), got 'dot'",
    ]
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  max_steps: -3\neval:\n  batch_size: 0\n")
    with pytest.raises(ConfigError) as err:
        load_config(PretrainConfig, bad)
    assert [line.split(":")[0] for line in err.value.problems] == [f"{bad}.train", f"{bad}.eval"]


def test_a_single_bad_value_keeps_its_one_line_message():
    with pytest.raises(ConfigError) as err:
        load_config(PretrainConfig, DEMO, ["--train.max_steps", "-3"])
    assert str(err.value) == "override --train.max_steps -3: max_steps must be >= 1, got -3"


def test_a_config_built_in_code_raises_every_problem_of_its_own_and_of_its_base_class():
    with pytest.raises(ValueError) as err:  # a ConfigError is a ValueError, as the hand-written raises were
        EvalConfig(search="x", exact_chunk_blocks=0)
    assert err.value.problems == [
        "eval.search must be one of auto, exact, index, got 'x'",
        "eval.exact_chunk_blocks must be >= 1, got 0",
    ]
    with pytest.raises(ConfigError) as err:  # TrainConfig's own check, then LoopConfig's two
        TrainConfig(grad_accum_steps=0, max_steps=0, batch_size=0)
    assert [line.split(" must")[0] for line in err.value.problems] == ["grad_accum_steps", "max_steps", "batch_size"]


def test_problems_gather_shared_checks_and_survive_a_process_boundary():
    def check_positive(value: int) -> None:
        if value <= 0:
            raise ValueError(f"value must be positive, got {value}")

    problems = Problems()
    problems.raise_if_any()  # nothing found: nothing raised
    problems.add("first")
    problems.check(check_positive, 1)
    problems.check(check_positive, -1)
    with pytest.raises(ConfigProblems) as err:
        problems.raise_if_any()
    assert err.value.problems == ["first", "value must be positive, got -1"]
    copy = pickle.loads(pickle.dumps(err.value))  # e.g. an error a spawned process hands back
    assert copy.problems == err.value.problems and str(copy) == str(err.value)
