"""The tagging stage (``realm.data.tag_stage``, ``realm tag``): X tagged in shards over processes, cached and
resumable, with exactly the rows ``prepare_sentences`` gives on the whole file."""

from __future__ import annotations

import json
import logging
import os

import pytest

from realm.cli.main import main
from realm.core.errors import DataFileError
from realm.data import tag_stage
from realm.data.sentences import load_jsonl_dataset, prepare_sentences
from realm.data.tag_stage import MANIFEST, TagStageConfig, tagged_sentences
from realm.data.tagging import RuleTagger, TaggingConfig
from realm.data.vocab import train_wordpiece
from realm.pretrain.data import prepared_sentences, sentence_tag_job

TEXTS = [
    "Ulm is the birthplace of Albert Einstein, born on 14 March 1879.",
    "Einstein moved to Princeton in 1933.",
    "The Danube passes the city of Ulm.",
    "Marie Curie was born in Warsaw in 1867.",
    "she won two prizes.",
    "Paris is the capital of France.",
    "The Rhine flows through Basel and Cologne.",
    "In 1905 Einstein published four papers.",
    "Warsaw lies on the Vistula.",
    "nothing salient here at all.",
]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tok")
    train_wordpiece(TEXTS * 3, 300, folder, min_frequency=1)
    return folder


@pytest.fixture(scope="module")
def tokenizer(tokenizer_dir):
    from realm.data.vocab import load_tokenizer

    return load_tokenizer(tokenizer_dir)


@pytest.fixture
def x(tmp_path):
    """X with a blank line, source uids and a gold span on some rows (a shard of 3 lines has none of them)."""
    lines = []
    for i, text in enumerate(TEXTS):
        record = {"text": text, "source_uid": f"u{i}"}
        if i < 2:
            record.update(answer_start=0, answer_end=3)
        lines.append(json.dumps(record))
    lines.insert(4, "")
    path = tmp_path / "pretrain.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _tag(x, tokenizer, cache, **stage):
    job = sentence_tag_job(str(x), tokenizer, TaggingConfig(kind="rule"), 24, cache)
    return tagged_sentences(job, TagStageConfig(**stage)), job.target


def _reference(x, tokenizer, tmp_path):
    """Today's single-process path: the whole file read as one dataset and prepared at once."""
    records = load_jsonl_dataset(x, cache_dir=tmp_path / "ref-hf")
    return prepare_sentences(records, tokenizer, RuleTagger(), 24)


def test_shards_equal_the_single_process_preparation_row_for_row(x, tokenizer, tmp_path):
    reference = _reference(x, tokenizer, tmp_path)
    rows, target = _tag(x, tokenizer, tmp_path / "cache", shard_size=3)
    assert sorted(p.name for p in target.glob("shard-*")) == [f"shard-{i:05d}" for i in range(4)]  # 11 lines
    assert rows.features == reference.features
    assert rows.to_list() == reference.to_list()
    assert rows["text"] == TEXTS and rows["gold_span"][0] != [-1, -1] and any(rows["salient_spans"])
    manifest = json.loads((target / MANIFEST).read_text())
    assert manifest["num_rows"] == len(TEXTS)
    assert [s["num_rows"] for s in manifest["shards"]] == [3, 2, 3, 2]  # line 5 is blank


def test_two_workers_give_the_rows_of_one(x, tokenizer, tmp_path):
    one, _ = _tag(x, tokenizer, tmp_path / "one", shard_size=3, num_workers=1)
    two, target = _tag(x, tokenizer, tmp_path / "two", shard_size=3, num_workers=2)
    assert two.to_list() == one.to_list()
    assert {json.loads((p / "shard.json").read_text())["num_lines"] for p in target.glob("shard-*")} == {3, 2}


def test_a_killed_build_resumes_from_its_published_shards(x, tokenizer, tmp_path, monkeypatch):
    full, target = _tag(x, tokenizer, tmp_path / "cache", shard_size=3)
    expected = full.to_list()
    # a kill during shard 2: shards 0, 1 published, 2 half-written under its temporary name, no manifest yet
    for name in ("shard-00002", "shard-00003"):
        os.rename(target / name, target / f".tmp-{name}-dead")
    (target / ".tmp-shard-00002-dead" / "data-00000-of-00001.arrow").write_bytes(b"torn")
    (target / MANIFEST).unlink()
    before = {p.name: os.stat(p / "shard.json").st_mtime_ns for p in target.glob("shard-*")}
    tagged = []
    original = tag_stage.ShardTagger.__call__
    monkeypatch.setattr(tag_stage.ShardTagger, "__call__", lambda self, shard: tagged.append(shard.name)
                        or original(self, shard))  # fmt: skip
    again, _ = _tag(x, tokenizer, tmp_path / "cache", shard_size=3)
    assert tagged == ["shard-00002", "shard-00003"]  # the published shards were reused, not re-tagged
    assert {p.name: os.stat(p / "shard.json").st_mtime_ns for p in target.glob("shard-0000[01]")} == before
    assert again.to_list() == expected
    assert not list(target.glob(".tmp-*")) and (target / MANIFEST).is_file()
    # complete now: a third call tags nothing
    tagged.clear()
    assert _tag(x, tokenizer, tmp_path / "cache", shard_size=3)[0].to_list() == expected and tagged == []


def test_a_changed_source_file_invalidates_the_cache(x, tokenizer, tmp_path):
    first, target = _tag(x, tokenizer, tmp_path / "cache", shard_size=4)
    assert first["text"][0] == TEXTS[0]
    x.write_text(json.dumps({"text": "Bern is the capital of Switzerland."}) + "\n")
    second, _ = _tag(x, tokenizer, tmp_path / "cache", shard_size=4)
    assert second["text"] == ["Bern is the capital of Switzerland."]
    assert sorted(p.name for p in target.iterdir()) == [MANIFEST, "shard-00000"]  # the stale shards are gone


def test_a_bad_line_is_named_by_its_line_in_the_source_file(x, tokenizer, tmp_path):
    lines = x.read_text().splitlines()
    lines[7] = '{"text": 5}'
    x.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataFileError, match=rf"^{x}:8: field 'text' is int"):
        _tag(x, tokenizer, tmp_path / "cache", shard_size=3)


def test_the_trainer_path_says_to_run_realm_tag_when_it_builds(x, tokenizer, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="realm.pretrain.data"):
        built = prepared_sentences(str(x), tokenizer, TaggingConfig(), 24, tmp_path / "cache")
    assert "run `realm tag` first" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="realm.pretrain.data"):
        assert prepared_sentences(str(x), tokenizer, TaggingConfig(), 24, tmp_path / "cache")["text"] == built["text"]
    assert "realm tag" not in caplog.text


def test_realm_tag_fills_the_cache_the_trainer_reads(x, tokenizer, tokenizer_dir, tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    argv = ["tag", "--config", "configs/pretrain/tiny.yaml", f"--data.sentences={x}",
            f"--data.tokenizer={tokenizer_dir}", f"--train.run_dir={run}", "--workers", "1", "--shard-size", "4"]
    assert main(argv) == 0
    assert f"{len(TEXTS)} sentences tagged (rule) -> {run / 'data' / 'pretrain-q32-rule'}" in capsys.readouterr().out
    monkeypatch.setattr(tag_stage.ShardTagger, "__call__", lambda self, shard: pytest.fail("re-tagged"))
    rows = prepared_sentences(str(x), tokenizer, TaggingConfig(), 32, run / "data")  # as the trainer calls it
    assert rows["text"] == TEXTS


def test_realm_tag_with_explicit_paths_and_its_errors(x, tokenizer_dir, tmp_path, capsys):
    argv = ["tag", "--sentences", str(x), "--tokenizer", str(tokenizer_dir), "--cache-dir", str(tmp_path / "c")]
    assert main(argv + ["--shard-size", "5"]) == 0
    assert (tmp_path / "c" / "pretrain-q64-rule" / MANIFEST).is_file()
    with pytest.raises(SystemExit, match="2"):
        main(["tag", "--sentences", str(x)])
    assert "give --config C" in capsys.readouterr().err
    assert main(argv + ["--workers", "0"]) == 2
    assert "num_workers must be at least 1" in capsys.readouterr().err


def test_a_second_builder_of_one_cache_is_refused(x, tokenizer, tmp_path):
    from realm.run.publication import RunInUseError, exclusive_lock

    job = sentence_tag_job(str(x), tokenizer, TaggingConfig(), 24, tmp_path / "cache")
    with exclusive_lock(job.target.parent / f".{job.target.name}.lock"):  # another `realm tag`, say
        with pytest.raises(RunInUseError, match="is being built by another process"):
            prepared_sentences(str(x), tokenizer, TaggingConfig(), 24, tmp_path / "cache")
    assert prepared_sentences(str(x), tokenizer, TaggingConfig(), 24, tmp_path / "cache")["text"] == TEXTS


def test_a_worker_whose_tagger_fails_to_load_reports_why_on_its_first_shard(x, tokenizer, tmp_path, monkeypatch):
    import datasets

    def missing(cfg):
        raise RuntimeError("spaCy is not installed")

    monkeypatch.setattr(tag_stage, "_WORKER", [])
    monkeypatch.setattr(tag_stage, "build_tagger", missing)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    job = sentence_tag_job(str(x), tokenizer, TaggingConfig(), 24, tmp_path / "cache")
    try:
        tag_stage._start_worker(job, "stamp", {})  # an initializer that raised would break the pool wordlessly
    finally:
        datasets.enable_progress_bars()
    shard = tag_stage.plan_shards(x, 100)[0]
    with pytest.raises(RuntimeError, match="spaCy is not installed"):
        tag_stage._tag_in_worker(shard)
