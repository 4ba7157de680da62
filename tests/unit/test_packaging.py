"""What ``pip install`` puts into site-packages: one import name, ``realm``, under a distribution name of its own, so
a user with ``trainer``, ``finetune`` or ``pipeline`` (all taken on the package index) installed keeps both."""

from __future__ import annotations

import configparser
import importlib.metadata
import json
import subprocess
import sys
import textwrap
import pytest

from realm.core.config import read_yaml
from realm.core.errors import ConfigError
from realm.core.resources import data_dir
from tests.helpers import ROOT
from tests.unit.test_architecture import BENCHMARKS, EXPERIMENTS, package_folders, setup_options

DISTRIBUTION = "realm-pretrain"
TAKEN = ("trainer", "finetune", "pipeline", "warmstart", "knnlm", "index_builder", "realm_cli")
"""The top-level names the project once installed; the first three belong to other distributions."""


def test_the_distribution_installs_realm_as_its_only_top_level_name():
    dist = importlib.metadata.distribution(DISTRIBUTION)
    assert (dist.read_text("top_level.txt") or "").split() == ["realm"]
    packages = setup_options()["packages"].split()
    assert {name.split(".")[0] for name in packages} == {"realm"}


def test_every_package_folder_is_in_the_wheel():
    """A folder with an ``__init__.py`` under a mapped folder but missing from ``packages`` would install without its
    code: each one must be listed, under its mapped name."""
    listed = set(setup_options()["packages"].split())
    wings = {BENCHMARKS, EXPERIMENTS}  # note: scripts run from the checkout, not installed
    folders = {name: folder for name, folder in package_folders().items() if name not in wings}
    expected = {".".join((name, *init.parent.relative_to(folder).parts))
                for name, folder in folders.items() for init in folder.rglob("__init__.py")}
    data = {name for name, folder in folders.items() if not (folder / "__init__.py").is_file()}
    assert data == {"realm.configs", "realm.launch"}  # data only: no code would be importable from them
    assert not [path for name in data for path in folders[name].rglob("*.py")]
    assert listed == expected | data
    code_folders = {p for p in ROOT.iterdir()
                    if p.is_dir() and (p / "__init__.py").is_file() and p.name not in {"tests", *wings}}
    assert code_folders <= set(folders.values()), "a top-level package folder that setup.cfg does not map"


def test_colliding_packages_import_beside_the_project(tmp_path):
    """Another distribution's ``trainer`` (and the other once-shared names) on the path: ``import trainer`` gets
    theirs, ``realm.trainer`` ours; run from outside the checkout, as a user's script would."""
    for name in TAKEN:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"ORIGIN = 'other {name}'\n")
    script = textwrap.dedent(f"""
        import importlib, json
        theirs = {{n: importlib.import_module(n).ORIGIN for n in {TAKEN!r}}}
        import realm.trainer.pretrain_loop, realm.finetune.train, realm.pipeline.real_text, realm.cli.main
        ours = [m.__file__ for m in (realm.trainer.pretrain_loop, realm.finetune.train, realm.pipeline.real_text)]
        print(json.dumps({{"theirs": theirs, "ours": ours}}))
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)},
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["theirs"] == {name: f"other {name}" for name in TAKEN}
    assert [path.split("/")[-2:] for path in found["ours"]] == [
        ["trainer", "pretrain_loop.py"], ["finetune", "train.py"], ["pipeline", "real_text.py"]]


def _package_data() -> dict[str, list[str]]:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    return {name: [g.strip() for g in globs.split(",")] for name, globs in parser["options.package_data"].items()}


@pytest.mark.parametrize("name", ["realm.configs", "realm.launch"])
def test_every_file_of_a_data_folder_is_package_data(name):
    """A new file under configs/ or launch/ that setup.cfg's globs miss would be absent from the wheel only."""
    folder = package_folders()[name]
    files = {p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    matched = {p for pattern in _package_data()[name] for p in folder.glob(pattern) if p.is_file()}
    assert files and files == matched, sorted(str(p.relative_to(folder)) for p in files - matched)


def test_a_users_own_config_wins_over_the_packaged_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    packaged = read_yaml("configs/warmup/demo.yaml")
    assert packaged == read_yaml(ROOT / "configs" / "warmup" / "demo.yaml")  # from outside the checkout
    (tmp_path / "configs" / "warmup").mkdir(parents=True)
    (tmp_path / "configs" / "warmup" / "demo.yaml").write_text("train:\n  max_steps: 3\n")
    assert read_yaml("configs/warmup/demo.yaml") == {"train": {"max_steps": 3}}


def test_a_missing_config_names_where_the_packaged_ones_are(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"config file not found: configs/warmup/nope.yaml \(nor among the packaged"):
        read_yaml("configs/warmup/nope.yaml")
    assert data_dir("configs") == ROOT / "configs" and data_dir("launch") == ROOT / "launch"  # a checkout's own
