"""The ``realm`` command on inputs it cannot use (issue 57, part 4): a tokenizer folder with a file missing, a blocks
Arrow file cut short or with flipped bytes, a run whose checkpoints all fail verification. Each is one line on
stderr that names the file and says what to do, with exit code 2 and no traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import realm.cli.data  # noqa: F401 - imported at collection, so each test times the command, not the imports
import realm.cli.inspect  # noqa: F401
from realm.cli.main import main
from realm.core.config import load_config, save_config
from realm.core.errors import RunError
from realm.pretrain.config import PretrainConfig
from realm.run import layout
from realm.run.publication import file_entries, new_staging, publish_folder
from realm.training.checkpoint import resolve_resume
from tests.helpers import make_run


def _error_line(capsys: pytest.CaptureFixture) -> str:
    """The one line a command wrote to stderr (it fails the test on a traceback or any other line)."""
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err.rstrip("\n")


def _saved_run(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(run_dir, blocks, tokenizer): a run directory with its config and tiny blocks, and no checkpoint yet."""
    run, blocks, tokenizer = make_run(tmp_path, 12)
    run.mkdir()
    overrides = [f"--data.tokenizer={tokenizer}", f"--data.blocks={blocks}"]
    save_config(load_config(PretrainConfig, None, overrides), run / "config.yaml")
    return run, blocks, tokenizer


def _checkpoint_failing_verification(run: Path) -> Path:
    """A published ``step-00000001`` whose weights no longer match the checksum its manifest lists."""
    staging = new_staging(layout.checkpoints_dir(run))
    (staging / "model.safetensors").write_bytes(b"weights")
    manifest = {"step": 1, "files": file_entries(staging, ["model.safetensors"])}
    folder = publish_folder(staging, layout.checkpoints_dir(run) / "step-00000001", manifest)
    (folder / "model.safetensors").write_bytes(b"weightz")  # one flipped byte
    return folder


@pytest.mark.parametrize("command", [["evaluate-mlm"], ["inspect", "--index", "exact"]])
def test_no_verified_checkpoint_advises_what_the_inspection_commands_take(tmp_path, capsys, command):
    """It advised ``--train.resume=never``, an option of ``realm train`` that these commands do not take."""
    run, _, _ = _saved_run(tmp_path)
    _checkpoint_failing_verification(run)
    argv = [command[0], str(run), *(["a query"] if command[0] == "inspect" else []), *command[1:]]
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()[-1]  # (above it, the error logged for each checkpoint rejected)
    assert err.startswith(f"realm {command[0]}: error: no checkpoint under {layout.checkpoints_dir(run)} passes ")
    assert "--train.resume" not in err and "--checkpoint" in err


def test_no_verified_checkpoint_still_advises_resume_never_to_the_trainer(tmp_path):
    run, _, _ = _saved_run(tmp_path)
    _checkpoint_failing_verification(run)
    with pytest.raises(RunError, match="passes verification .*rerun with --train.resume=never to start over"):
        resolve_resume(run, "auto")
