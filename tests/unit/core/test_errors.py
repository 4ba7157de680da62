"""One user-error path: every error a user can fix derives from UserError, and run_command alone turns it into one
line and exit code 2; other errors keep their traceback. Every job's --help lists its dotted keys."""

import pytest

from realm.core.config import config_from_command_line
from realm.core.errors import (
    ArgumentError,
    ConfigError,
    DataFileError,
    InputError,
    MissingFileError,
    MissingPackageError,
    RunError,
    UserError,
    run_command,
)
from realm.data.blocks import BlocksTokenizerError
from realm.data.corpus import CorpusError
from realm.finetune.train import main as finetune_main
from realm.pretrain.config import PretrainConfig
from realm.run.live_index import IndexVersionError
from realm.warmstart.ict_train import ICTConfig


@pytest.mark.parametrize(
    "cls",
    [ConfigError, DataFileError, MissingFileError, InputError, ArgumentError, RunError, IndexVersionError, CorpusError,
     BlocksTokenizerError, MissingPackageError],
)  # fmt: skip
def test_every_user_error_is_reported_in_one_line_with_exit_2(cls, capsys):
    def entry(argv):
        raise cls(f"data/x.jsonl:3: bad record ({argv[0]})")

    assert issubclass(cls, UserError)
    assert run_command("realm thing", entry, ["arg"]) == 2
    err = capsys.readouterr().err
    assert err == "realm thing: error: data/x.jsonl:3: bad record (arg)\n"


def test_the_error_line_is_one_write_so_ranks_sharing_stderr_do_not_run_together(monkeypatch):
    # under accelerate the ranks share one unbuffered stderr: a line written in two pieces (text, then newline)
    # let another rank's line land between them, which once failed CI
    writes = []

    class Recorder:
        def write(self, text):
            writes.append(text)

        def flush(self):
            pass

    monkeypatch.setattr("sys.stderr", Recorder())

    def entry(argv):
        raise RunError("no checkpoint passes verification")

    assert run_command("realm train", entry, []) == 2
    assert writes == ["realm train: error: no checkpoint passes verification\n"]


def test_a_bug_keeps_its_traceback():
    def entry(argv):
        raise KeyError("not a user error")

    with pytest.raises(KeyError):
        run_command("realm thing", entry, [])


def test_exit_code_of_a_successful_entry_is_passed_through():
    assert run_command("realm thing", lambda argv: None, []) == 0
    assert run_command("realm thing", lambda argv: 3, []) == 3


def test_help_lists_every_dotted_key_with_its_default(capsys):
    with pytest.raises(SystemExit) as exit_:
        finetune_main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for key in ("--train.run_dir=runs/qa", "--data.blocks=''", "--finetune.retriever_beam=100", "--task.name=nq"):
        assert key in out, key


def test_jobs_share_the_train_and_data_sections():
    for cls in (PretrainConfig, ICTConfig):
        cfg = config_from_command_line(cls, ["--train.run_dir=R", "--data.blocks=B", "--train.stop_at_step=3"], "x", "")
        assert (cfg.train.run_dir, cfg.data.blocks, cfg.train.last_step) == ("R", "B", 3)


def test_the_builder_refuses_a_run_directory_that_does_not_exist(tmp_path, capsys):
    from realm.cli.main import main

    assert main(["index", f"--run_dir={tmp_path / 'nope'}", "--once=true"]) == 2
    assert f"run_dir {tmp_path / 'nope'} does not exist" in capsys.readouterr().err
    assert not (tmp_path / "nope").exists()
    (tmp_path / "a-file").write_text("")
    assert main(["index", f"--run_dir={tmp_path / 'a-file'}", "--once=true"]) == 2
    assert f"run_dir {tmp_path / 'a-file'} is not a directory" in capsys.readouterr().err


def test_a_config_section_given_as_a_scalar_is_an_error(tmp_path):
    from realm.core.config import load_config

    (tmp_path / "bad.yaml").write_text("train: 5\n")
    with pytest.raises(ConfigError, match=r"bad.yaml.train: expected a section \(a mapping\), got 5"):
        load_config(PretrainConfig, tmp_path / "bad.yaml", ["--train.run_dir=x"])
    with pytest.raises(ConfigError, match="override --train=5: expected a mapping for TrainConfig, got 5"):
        load_config(PretrainConfig, None, ["--train=5"])
