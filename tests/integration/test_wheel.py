"""The wheel runs outside the checkout: built from the sources, installed into a new virtual environment that sees
the third-party dependencies but not this checkout, then ``realm demo`` (the packaged recipes under ``configs/``)
and ``realm launch`` (the packaged scripts) run from a folder of their own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.helpers import ROOT, subprocess_env
from tests.unit.test_architecture import BENCHMARKS, EXPERIMENTS, package_folders

pytestmark = pytest.mark.slow

BUILD_FILES = ("setup.cfg", "pyproject.toml", "README.md")
DEMO = ["--num_entities=60", "--vocab_size=400", "--warm_start.warmup_steps=0", "--warm_start.ict_steps=1",
        "--pretrain_steps=1", "--refresh.refresh_interval=1", "--refresh.swap_lag=0", "--train.log_interval=1",
        "--train.save_interval=1", "--eval.max_examples=4", "--qa_steps=0"]  # fmt: skip
"""The smallest demo (60 entities fill ICT's batch): every stage but the warm-up and QA, which read packaged recipes
as ICT and pre-training do."""


def _run(args: list, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=240, **kwargs)
    assert proc.returncode == 0, f"{args[:3]} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


def _wheel(tmp_path: Path) -> Path:
    """The wheel, built from a copy of the sources (so the checkout gets no build/ folder)."""
    src, dist = tmp_path / "src", tmp_path / "dist"
    src.mkdir()
    for name in BUILD_FILES:
        shutil.copy2(ROOT / name, src / name)
    for name, folder in package_folders().items():
        if name not in (BENCHMARKS, EXPERIMENTS):  # note: the two wings are scripts, not in the wheel
            shutil.copytree(folder, src / folder.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", dist,
          src])  # fmt: skip
    (wheel,) = dist.glob("realm_pretrain-*.whl")
    return wheel


def _venv(tmp_path: Path, wheel: Path) -> Path:
    """A new environment with the wheel installed; the dependencies come from this one's site-packages, added as a
    plain path entry, so its ``.pth`` files (the editable install's finder) are not read."""
    venv = tmp_path / "venv"
    _run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", venv])
    (site,) = venv.glob("lib/python*/site-packages")
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "--no-deps", "--no-index", "-q",
          wheel])  # fmt: skip
    return venv


def _stub(path: Path, body: str) -> None:
    path.write_text(f"#!/usr/bin/env bash\n{body}\n")
    path.chmod(0o755)


def test_the_wheel_runs_the_demo_and_the_launch_scripts_outside_the_checkout(tmp_path):
    venv = _venv(tmp_path, _wheel(tmp_path))
    realm = venv / "bin" / "realm"
    user = tmp_path / "user"  # note: tmp_path is outside the checkout, and so is everything here
    user.mkdir()
    env = {k: v for k, v in subprocess_env().items() if k != "PYTHONPATH"}
    where = _run([venv / "bin" / "python", "-c", "import realm.core.config as c; print(c.__file__)"], cwd=user, env=env)
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout  # the wheel's code, not the checkout's

    _run([realm, "demo", "--out", "run", *DEMO], cwd=user, env=env)
    summary = json.loads((user / "run" / "summary.json").read_text())
    assert summary["pretrain_steps"] == 1 and (user / "run" / "ict" / "retriever" / "manifest.json").is_file()

    # the launch scripts: not runnable from site-packages (they run relative to their folder), so copied first
    proc = subprocess.run([realm, "launch", "pretrain"], cwd=user, env=env, capture_output=True, text=True)
    assert proc.returncode == 2 and "realm launch copy" in proc.stderr and len(proc.stderr.splitlines()) == 1
    _run([realm, "launch", "copy"], cwd=user, env=env)
    assert (user / "launch" / "accelerate" / "single_cpu.yaml").is_file() and os.access(
        user / "launch" / "slurm" / "pretrain.sbatch", os.X_OK)  # fmt: skip
    stubs, calls = tmp_path / "bin", tmp_path / "calls"
    stubs.mkdir()
    _stub(stubs / "accelerate", f'echo "$PWD|$*" >> {calls}')
    env.update(PATH=f"{stubs}:{env['PATH']}", TOPOLOGY="single_cpu")
    _run([realm, "launch", "pretrain", "--config", "configs/pretrain/tiny.yaml", "--train.run_dir=runs/t"], cwd=user,
         env=env)  # fmt: skip
    cwd, args = calls.read_text().strip().split("|")
    assert cwd == str(user)  # relative paths of the command line resolve in the user's folder
    assert args.startswith("launch ") and "--config_file launch/accelerate/single_cpu.yaml" in args
    assert args.endswith("-m realm.trainer.pretrain --config configs/pretrain/tiny.yaml --train.run_dir=runs/t")
