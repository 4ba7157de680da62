"""The rule by which a run finds the paths it recorded after it moved (realm.run.paths)."""

import json
import shutil
from pathlib import Path

import pytest

from realm.core.errors import MissingFileError
from realm.pretrain.config import PretrainConfig
from realm.run.paths import absolute_paths, locate, moved_root, prepare_job_config, record_path, relocate
from realm.run.publication import new_staging, publish_folder, read_manifest


def test_moved_root_strips_the_common_trailing_folders(tmp_path: Path) -> None:
    assert moved_root("/x/demo/qa", "/y/demo/qa") == (Path("/x"), Path("/y"))
    assert moved_root("/x/demo/qa", "/y/renamed/qa") == (Path("/x/demo"), Path("/y/renamed"))
    assert moved_root("/x/run", "/x/run") is None
    assert moved_root("runs/demo", "/y/runs/demo") is None  # a relative record says nothing about a move


def test_locate_prefers_the_run_itself_then_the_recorded_place_then_where_the_move_took_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # note: the last case's relative record resolves against the working directory, which is a checkout where the
    # README's `realm demo` may have written runs/demo/tokenizer; an empty one keeps that record "not where it was"
    monkeypatch.chdir(tmp_path)
    old, new = tmp_path / "old" / "demo", tmp_path / "new" / "demo"
    (new / "qa").mkdir(parents=True)
    (new / "blocks").mkdir()
    (old / "qa" / "tokenizer").mkdir(parents=True)  # a copy: the original still exists
    (new / "qa" / "tokenizer").mkdir()
    outside = tmp_path / "corpus"
    outside.mkdir()
    # 1. inside the run: the run's own copy, even while the original exists
    assert locate(str(old / "qa" / "tokenizer"), old / "qa", new / "qa") == str(new / "qa" / "tokenizer")
    # 2. an input outside that stayed where it was
    assert locate(str(outside), old / "qa", new / "qa") == str(outside)
    # 3. a sibling stage that moved with the whole folder
    assert locate(str(old / "blocks"), old / "qa", new / "qa") == str(new / "blocks")
    # 4. found nowhere, and anything that is not a local path: as recorded
    assert locate(str(old / "gone"), old / "qa", new / "qa") == str(old / "gone")
    assert locate("bert-base-uncased", old / "qa", new / "qa") == "bert-base-uncased"
    # an old record, relative to the directory the run was launched from
    assert locate("runs/demo/tokenizer", "runs/demo", new) == str(new / "tokenizer")


def test_config_paths_are_made_absolute_and_relocated_after_a_move(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("run/tokenizer", "run/blocks"):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / "sentences.jsonl").write_text("")
    cfg = PretrainConfig()
    cfg.train.run_dir, cfg.data.tokenizer, cfg.data.blocks = "run", "run/tokenizer", "run/blocks"
    cfg.data.sentences, cfg.model.init_from = "sentences.jsonl", "bert-base-uncased"
    cfg.refresh.builder_config, cfg.data.cache_dir = "configs/index/tiny.yaml", "cache"
    absolute_paths(cfg)
    assert cfg.data.cache_dir == str(tmp_path / "cache")  # written by the job: absolute before it exists
    assert (cfg.train.run_dir, cfg.data.blocks) == (str(tmp_path / "run"), str(tmp_path / "run" / "blocks"))
    assert cfg.data.sentences == str(tmp_path / "sentences.jsonl")
    assert (cfg.model.init_from, cfg.refresh.builder_config) == ("bert-base-uncased", "configs/index/tiny.yaml")
    assert cfg.data.masking == "salient"  # not a path field

    shutil.move(tmp_path / "run", tmp_path / "moved")
    changed = relocate(cfg, tmp_path / "moved", str(tmp_path / "run"))
    assert cfg.train.run_dir == str(tmp_path / "moved")
    assert cfg.data.tokenizer == str(tmp_path / "moved" / "tokenizer")
    assert cfg.data.sentences == str(tmp_path / "sentences.jsonl")  # outside the run, where it was
    assert {key for key, _, _ in changed} == {"train.run_dir", "data.tokenizer", "data.blocks"}
    assert cfg.data.cache_dir == str(tmp_path / "cache")  # outside the run and not written yet: as recorded


def test_a_moved_job_names_the_input_found_nowhere_and_its_override(tmp_path: Path) -> None:
    (tmp_path / "moved").mkdir()
    cfg = PretrainConfig()
    cfg.train.run_dir, cfg.data.sentences = str(tmp_path / "run"), str(tmp_path / "gone.jsonl")
    cfg.data.cache_dir = str(tmp_path / "run" / "cache")  # an output: never missing
    with pytest.raises(MissingFileError, match=r"data\.sentences=.*gone\.jsonl.*pass --data\.sentences=PATH"):
        prepare_job_config(cfg, tmp_path / "moved", str(tmp_path / "run"), tmp_path / "moved" / "config.yaml")


def test_a_manifest_records_paths_inside_its_run_relative_and_reads_them_back_after_a_move(tmp_path: Path) -> None:
    run, outside = tmp_path / "a" / "run", tmp_path / "corpus"
    (run / "blocks").mkdir(parents=True)
    outside.mkdir()
    assert record_path(run / "blocks", run) == "blocks"
    assert record_path(outside, run) == str(outside)
    assert record_path("bert-base-uncased", run) == "bert-base-uncased"
    final = run / "retriever" / "step-00000001"
    manifest = {"blocks": "blocks", "tokenizer": str(outside), "index": str(tmp_path / "a" / "sibling"),
                "run_root": "../.."}  # fmt: skip
    (tmp_path / "a" / "sibling").mkdir()
    publish_folder(new_staging(final.parent), final, manifest)
    assert json.loads((final / "manifest.json").read_text())["published_at"] == str(final)

    shutil.move(tmp_path / "a", tmp_path / "b")
    read = read_manifest(tmp_path / "b" / "run" / "retriever" / "step-00000001")
    assert read["blocks"] == str(tmp_path / "b" / "run" / "blocks")
    assert read["tokenizer"] == str(outside)
    assert read["index"] == str(tmp_path / "b" / "sibling")
