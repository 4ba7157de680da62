"""What ``realm train`` does with inputs it cannot use: one line and exit code 2, said before any work, and no run
folder left behind by a run that never started."""

import pytest

from realm.core.errors import run_command
from realm.trainer.pretrain import main
from tests.helpers import data_overrides

TINY = "configs/pretrain/tiny.yaml"


def _train(world, run, *extra):
    argv = ["--config", TINY, *data_overrides(world), f"--train.run_dir={run}", *extra]
    return run_command("realm train", main, argv)


def test_a_sentences_file_too_small_for_one_global_batch_is_refused_before_any_work(tiny_world, tmp_path, capsys):
    small = tmp_path / "three.jsonl"
    small.write_text("".join(tiny_world["pretrain"].read_text().splitlines(keepends=True)[:3]))
    run = tmp_path / "run"
    assert _train(tiny_world, run, f"--data.sentences={small}") == 2
    last = capsys.readouterr().err.splitlines()[-1]  # (above it: the datasets progress of reading the file)
    assert last.startswith(f"realm train: error: {small}: 3 examples cannot fill a global batch of 8")
    assert not run.exists()  # no export, no index, no builder: and the folder this run made is gone again


def test_a_run_dir_that_is_a_file_is_refused_in_one_line(tiny_world, tmp_path, capsys):
    file = tmp_path / "run"
    file.write_text("not a folder")
    assert _train(tiny_world, file) == 2
    err = capsys.readouterr().err
    assert err == f"realm train: error: train.run_dir={file} is a file, not a run directory\n"
    assert file.read_text() == "not a folder"


def test_a_failed_set_up_keeps_a_run_folder_that_existed_before(tiny_world, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("mine")
    assert _train(tiny_world, run, f"--data.sentences={tmp_path / 'missing.jsonl'}") == 2
    assert (run / "notes.txt").read_text() == "mine"
