"""``realm launch``: copies the packaged launch/ folder into a project folder and runs a script of it exec-style (its
exit code and working folder are the script's), refusing with one line what it cannot run."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from realm.cli import launch
from realm.core.errors import ArgumentError
from tests.helpers import ROOT, subprocess_env


def test_copy_puts_the_packaged_scripts_into_a_folder_and_keeps_an_existing_copy(tmp_path):
    target = launch.copy_scripts(tmp_path)
    packaged = {p.relative_to(ROOT / "launch"): p.read_bytes() for p in (ROOT / "launch").rglob("*") if p.is_file()
                and "__pycache__" not in p.parts}  # fmt: skip
    assert {p.relative_to(target): p.read_bytes() for p in target.rglob("*") if p.is_file()} == packaged
    assert all(os.access(p, os.X_OK) for p in (*target.glob("*.sh"), *target.glob("slurm/*")))
    (target / "pretrain.sh").write_text("# edited\n")
    with pytest.raises(ArgumentError, match="exists already"):
        launch.copy_scripts(tmp_path)
    assert (target / "pretrain.sh").read_text() == "# edited\n"


def test_the_scripts_of_the_current_folder_win_then_the_checkouts(tmp_path, monkeypatch):
    assert launch.find_script("pretrain", tmp_path) == ROOT / "launch" / "pretrain.sh"  # an editable install
    launch.copy_scripts(tmp_path)
    assert launch.find_script("pretrain", tmp_path) == tmp_path / "launch" / "pretrain.sh"
    with pytest.raises(ArgumentError, match=r"no launch script 'nope'; one of: (\w+, )*pretrain(, \w+)*, or copy$"):
        launch.find_script("nope", tmp_path)
    monkeypatch.setattr(launch, "CHECKOUT_ROOT", tmp_path / "elsewhere")  # as from a wheel: site-packages is no place
    with pytest.raises(ArgumentError, match=r"no launch/finetune.sh in .*: `realm launch copy` puts the scripts here"):
        launch.find_script("finetune", tmp_path / "launch")


def test_launch_execs_the_script_in_its_folder_with_the_arguments_and_its_exit_code(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    launch.copy_scripts(project)
    stubs, calls = tmp_path / "bin", tmp_path / "calls"
    stubs.mkdir()
    (stubs / "accelerate").write_text(f'#!/usr/bin/env bash\necho "$PWD|$*" >> {calls}\nexit 7\n')
    (stubs / "accelerate").chmod(0o755)
    env = {**subprocess_env(), "PATH": f"{stubs}:{os.environ['PATH']}", "TOPOLOGY": "single_cpu"}
    proc = subprocess.run([sys.executable, "-m", "realm.cli.main", "launch", "finetune", "--init.run=runs/a b"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 7, proc.stderr
    cwd, args = calls.read_text().strip().split("|")
    assert cwd == str(project) and "--config_file launch/accelerate/single_cpu.yaml" in args
    assert args.endswith("-m realm.finetune.train --init.run=runs/a b")


def test_help_lists_the_scripts_and_no_name_is_a_usage_error(capsys):
    assert launch.main(["--help"]) == 0
    assert "realm launch copy [DIR]" in capsys.readouterr().out
    assert launch.main([]) == 2
    assert "scripts: " in capsys.readouterr().err and "pretrain" in launch.script_names(ROOT / "launch")
