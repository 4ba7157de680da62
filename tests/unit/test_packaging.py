"""What ``pip install`` puts into site-packages: one import name, ``realm``, under a distribution name of its own, so
a user with ``trainer``, ``finetune`` or ``pipeline`` (all taken on the package index) installed keeps both."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import textwrap

from tests.helpers import ROOT
from tests.unit.test_architecture import BENCH, package_folders, setup_options

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
    folders = {name: folder for name, folder in package_folders().items() if name != BENCH}
    expected = {".".join((name, *init.parent.relative_to(folder).parts))
                for name, folder in folders.items() for init in folder.rglob("__init__.py")}
    assert listed == expected
    code_folders = {p for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").is_file() and p.name != "tests"}
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
