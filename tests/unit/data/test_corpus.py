"""Corpus readers (jsonl, DPR tsv, HF datasets) and cutting documents into blocks."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import datasets
import pytest

from realm.data.blocks import (
    BLOCK_FEATURES,
    BlocksTokenizerError,
    block_uid,
    build_blocks,
    build_blocks_from_config,
    check_blocks_tokenizer,
    cut_body,
    load_blocks,
    save_blocks,
)
from realm.data.corpus import (
    CorpusConfig,
    CorpusError,
    CorpusStats,
    Document,
    read_documents,
    read_dpr_tsv,
    read_hf,
    read_jsonl,
)
from realm.data.vocab import load_tokenizer, train_wordpiece
from tests.helpers import FIXTURES, SHARED_REAL

REAL = SHARED_REAL
WIKI_SAMPLE = REAL / "wikipedia_passages/sample_data.jsonl"

LONG_SENTENCE = " ".join(f"word{i % 17} and thing{i % 5}, then" for i in range(60))


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    texts = [json.loads(line)["text"] for line in (FIXTURES / "corpus_docs.jsonl").read_text().splitlines() if line]
    texts += [LONG_SENTENCE, "Aaron Moses Sinai priest prophet brother quoted tab more title"]
    return train_wordpiece(texts * 3, 300, tmp_path_factory.mktemp("vocab"), min_frequency=1)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_read_jsonl_yields_documents_and_counts_records():
    stats = CorpusStats()
    docs = list(read_jsonl(FIXTURES / "corpus_docs.jsonl", stats=stats))
    assert [d.id for d in docs] == ["d1", "d2", "3", "d4"]  # the blank line is ignored, ids become str
    assert docs[0].title == "Ada Lovelace" and docs[0].text.startswith("Ada Lovelace was")
    assert stats.num_records == 4 and stats.num_malformed == 0


def test_read_jsonl_uses_configured_field_names(tmp_path):
    path = write(tmp_path / "c.jsonl", json.dumps({"pid": 7, "name": "T", "body": "Some text."}) + "\n")
    (doc,) = read_jsonl(path, id_field="pid", title_field="name", text_field="body")
    assert doc == Document(id="7", title="T", text="Some text.")


@pytest.mark.parametrize(
    "bad_line, reason",
    [
        ("{not json", "invalid JSON"),
        ('{"id": "x", "title": "T"}', "missing field"),
        ('["a list"]', "expected a JSON object"),
        ('{"id": "x", "title": "T", "text": 5}', "text and title must be strings"),
    ],
)
def test_malformed_jsonl_line_raises_naming_file_and_line(tmp_path, bad_line, reason):
    good = json.dumps({"id": "a", "title": "T", "text": "Fine."})
    path = write(tmp_path / "bad.jsonl", f"{good}\n{good}\n{bad_line}\n{good}\n")
    with pytest.raises(CorpusError, match=rf"bad\.jsonl:3: {reason}"):
        list(read_jsonl(path))


def test_skip_malformed_skips_counts_and_warns(tmp_path, caplog):
    good = json.dumps({"id": "a", "title": "T", "text": "Fine."})
    path = write(tmp_path / "bad.jsonl", f"{good}\n{{oops\n{good}\n{{}}\n")
    stats = CorpusStats()
    with caplog.at_level(logging.WARNING, logger="realm.data.corpus"):
        docs = list(read_jsonl(path, skip_malformed=True, stats=stats))
    assert len(docs) == 2 and stats.num_malformed == 2 and stats.num_records == 2
    assert "skipped 2 malformed" in caplog.text


def test_missing_files_raise_errors_naming_the_path(tmp_path):
    for reader in (read_jsonl, read_dpr_tsv):
        with pytest.raises(FileNotFoundError, match="nope.txt"):
            reader(tmp_path / "nope.txt")
    with pytest.raises(FileNotFoundError, match="nodir"):
        read_hf(str(tmp_path / "nodir"), from_disk=True)
    with pytest.raises(FileNotFoundError, match="noblocks"):
        load_blocks(tmp_path / "noblocks")


def test_dpr_tsv_undoes_csv_quoting():
    docs = list(read_dpr_tsv(FIXTURES / "dpr_psgs.tsv"))
    assert [d.id for d in docs] == ["1", "2", "3"]
    assert docs[0].text == 'Aaron Aaron ( or ; "Ahärôn") is a prophet, high priest, and the brother of Moses.'
    assert docs[0].title == "Aaron"
    assert docs[2].text == 'A "quoted"\ttab and "more"' and docs[2].title == 'Quoted "Title"'


def test_dpr_tsv_wrong_column_count_and_bad_header(tmp_path):
    path = write(tmp_path / "p.tsv", "id\ttext\ttitle\n1\tok text\tT\n2\tmissing title\n")
    with pytest.raises(CorpusError, match=r"p\.tsv:3: expected 3"):
        list(read_dpr_tsv(path))
    stats = CorpusStats()
    assert len(list(read_dpr_tsv(path, skip_malformed=True, stats=stats))) == 1 and stats.num_malformed == 1
    with pytest.raises(CorpusError, match=r"h\.tsv:1: expected the header"):
        list(read_dpr_tsv(write(tmp_path / "h.tsv", "id\tbody\ttitle\n1\tx\tT\n")))


def test_hf_disk_reader_handles_dataset_dicts_and_missing_columns(tmp_path):
    rows = {"title": ["A", "B"], "text": ["Alpha text.", None]}
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows)}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(CorpusError, match="row 1"):
        list(read_hf(str(tmp_path / "dd"), from_disk=True))
    stats = CorpusStats()
    docs = list(read_hf(str(tmp_path / "dd"), from_disk=True, skip_malformed=True, stats=stats))
    assert docs == [Document(id="0", title="A", text="Alpha text.")] and stats.num_malformed == 1
    with pytest.raises(CorpusError, match="no split 'dev'"):
        read_hf(str(tmp_path / "dd"), from_disk=True, split="dev")
    datasets.Dataset.from_dict({"body": ["x"]}).save_to_disk(str(tmp_path / "d"))
    with pytest.raises(CorpusError, match=r"missing column\(s\) \['text', 'title'\]"):
        read_hf(str(tmp_path / "d"), from_disk=True)


@pytest.mark.skipif(not WIKI_SAMPLE.is_file(), reason="real data not present")
def test_real_wikipedia_sample_loads_completely():
    stats = CorpusStats()
    cfg = CorpusConfig(path=str(WIKI_SAMPLE), format="jsonl", title_field=None, text_field="contents")
    docs = list(read_documents(cfg, stats))
    assert len(docs) == 1000 and stats.num_records == 1000 and stats.num_malformed == 0
    assert docs[0].title == "Evan Morris" and docs[0].text.startswith("Evan Morris Evan L. Morris (January 26")
    assert all(d.title and d.text and '"' not in d.title[:1] for d in docs)
    assert len({d.id for d in docs}) == 1000


@pytest.mark.parametrize(
    "bad_record, reason",
    [
        ({"id": "x", "contents": "A body with no title line."}, "no title line"),
        ({"id": "x", "contents": '""\nA body after a blank title.'}, "no title line"),
        ({"id": "x", "text": '"T"\nWrong field.'}, r"missing field\(s\) \['contents'\]"),
    ],
)
def test_flashrag_contents_without_a_title_line_is_malformed(tmp_path, bad_record, reason):
    first = WIKI_SAMPLE.read_text(encoding="utf-8").splitlines()[0] if WIKI_SAMPLE.is_file() else None
    good = first or json.dumps({"id": "0", "contents": '"Evan Morris"\nEvan Morris Evan L. Morris (January 26'})
    path = write(tmp_path / "flash.jsonl", f"{good}\n{json.dumps(bad_record)}\n{good}\n")
    cfg = CorpusConfig(path=str(path), title_field=None, text_field="contents")
    with pytest.raises(CorpusError, match=rf"flash\.jsonl:2: {reason}"):
        list(read_documents(cfg))
    stats = CorpusStats()
    cfg = CorpusConfig(path=str(path), title_field=None, text_field="contents", skip_malformed=True)
    docs = list(read_documents(cfg, stats))
    assert [d.title for d in docs] == ["Evan Morris"] * 2 and docs[0].text.startswith("Evan Morris Evan L. Morris")
    assert stats.num_records == 2 and stats.num_malformed == 1
    rows = {"contents": [json.loads(good)["contents"], bad_record.get("contents", "")]}
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "d"))
    with pytest.raises(CorpusError, match="row 1: no title line"):
        list(read_hf(str(tmp_path / "d"), from_disk=True, title_field=None, text_field="contents"))


def test_cut_body_packs_sentences_and_cuts_long_ones_at_word_starts():
    # sentences start at pieces 0, 3 and 5; pieces 6 and 9 continue a word.
    word_starts = [True, True, True, True, True, True, False, True, True, False]
    assert cut_body([0, 3, 5], word_starts, room=5) == [(0, 5), (5, 10)]
    assert cut_body([0, 3, 5], word_starts, room=4) == [(0, 3), (3, 5), (5, 8), (8, 10)]
    assert cut_body([0], [True] + [False] * 6, room=3) == [(0, 3), (3, 6), (6, 7)]  # one giant word


def test_blocks_fit_and_partition_the_body(tokenizer, tmp_path):
    docs = [
        Document(id="long", title="A long title to be truncated", text=f"Intro here. Then {LONG_SENTENCE}. End."),
        Document(id="short", title="Ada", text="Ada Lovelace was an English mathematician."),
    ]
    blocks = build_blocks(docs, tokenizer, 32, max_title_length=4, cache_dir=tmp_path)
    assert blocks.features == BLOCK_FEATURES
    for row in blocks:
        assert len(row["title_ids"]) + len(row["body_ids"]) + 3 <= 32
        assert len(row["title_ids"]) <= 4
        # the block text is cut where its ids are, so re-tokenizing it gives them back
        assert tokenizer(row["text"], add_special_tokens=False)["input_ids"] == row["body_ids"]
    long_rows = [row for row in blocks if row["doc_id"] == "long"]
    assert len(long_rows) > 3  # the long sentence was split
    assert long_rows[0]["text"] == "Intro here."  # a sentence boundary is preferred to filling the block
    full = tokenizer(docs[0].text, add_special_tokens=False)["input_ids"]
    assert sum((row["body_ids"] for row in long_rows), []) == full
    assert blocks[len(blocks) - 1]["text"] == docs[1].text and blocks[len(blocks) - 1]["title"] == "Ada"


def test_block_uid_is_sha1_of_title_sep_body(tokenizer, tmp_path):
    blocks = build_blocks([Document(id="1", title="Ada", text="Ada was here.")], tokenizer, 64, cache_dir=tmp_path)
    expected = hashlib.sha1("Ada <sep> Ada was here.".encode("utf-8")).hexdigest()
    assert blocks[0]["uid"] == expected == block_uid("Ada", "Ada was here.")


def test_build_blocks_is_deterministic(tokenizer, tmp_path):
    def build(sub: str) -> list[dict]:
        docs = read_jsonl(FIXTURES / "corpus_docs.jsonl")
        return build_blocks(docs, tokenizer, 24, max_title_length=4, cache_dir=tmp_path / sub, batch_size=2).to_list()

    first, second = build("a"), build("b")
    assert first == second and len(first) > 3


def test_empty_documents_are_skipped_counted_and_logged(tokenizer, tmp_path, caplog):
    stats = CorpusStats()
    with caplog.at_level(logging.WARNING, logger="realm.data.corpus"):
        blocks = build_blocks(
            read_jsonl(FIXTURES / "corpus_docs.jsonl", stats=stats), tokenizer, 64, cache_dir=tmp_path, stats=stats
        )
    assert stats.num_records == 4 and stats.num_empty == 1 and stats.num_documents == 3
    assert stats.num_blocks == len(blocks) and "3" not in set(blocks["doc_id"])
    assert "skipped 1 empty documents" in caplog.text


def test_reader_errors_surface_through_build_blocks(tokenizer, tmp_path):
    path = write(tmp_path / "bad.jsonl", "{broken\n")
    with pytest.raises(CorpusError, match=r"bad\.jsonl:1"):
        build_blocks(read_jsonl(path), tokenizer, 64, cache_dir=tmp_path / "cache")


def test_save_and_load_blocks_round_trip(tokenizer, tmp_path):
    blocks = build_blocks(read_jsonl(FIXTURES / "corpus_docs.jsonl"), tokenizer, 64, cache_dir=tmp_path / "c")
    saved = save_blocks(blocks, tmp_path / "blocks", stats=CorpusStats(num_blocks=len(blocks)))
    assert load_blocks(saved).to_list() == blocks.to_list()
    assert json.loads((saved / "corpus_stats.json").read_text())["num_blocks"] == len(blocks)
    with pytest.raises(FileExistsError, match="blocks"):
        save_blocks(blocks, saved)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".blocks")]  # no staging folder left


@pytest.mark.skipif(not WIKI_SAMPLE.is_file(), reason="real data not present")
def test_build_blocks_from_config_on_real_sample(tokenizer, tmp_path):
    cfg = CorpusConfig(path=str(WIKI_SAMPLE), title_field=None, text_field="contents", max_block_length=128)
    out = build_blocks_from_config(cfg, tokenizer, tmp_path / "blocks")
    blocks = load_blocks(out)
    stats = json.loads((out / "corpus_stats.json").read_text())
    assert stats["num_documents"] == 1000 and stats["num_blocks"] == len(blocks) >= 1000
    assert len(set(blocks["doc_id"])) == 1000
    assert [p.name for p in tmp_path.iterdir()] == ["blocks"]  # the generation cache was removed


def test_corpus_config_validation():
    with pytest.raises(ValueError, match="leaves no body wordpiece"):
        CorpusConfig(path="x", max_block_length=35, max_title_length=32)
    with pytest.raises(ValueError, match="format"):
        CorpusConfig(path="x", format="csv")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="corpus path is not set"):
        read_documents(CorpusConfig())


@pytest.mark.parametrize("fmt", ["jsonl", "dpr_tsv"])
def test_repeated_document_ids_are_refused_naming_both_lines_before_anything_is_written(tokenizer, tmp_path, fmt):
    ids = ["a", "b", "a", "c", "b", "a"]
    if fmt == "jsonl":
        records = [json.dumps({"id": i, "title": "T", "text": f"Doc {i}."}) for i in ids]
        path = write(tmp_path / "docs.jsonl", "".join(f"{r}\n" for r in records))
        first_line = 1
    else:
        path = write(tmp_path / "docs.tsv", "id\ttext\ttitle\n" + "".join(f"{i}\tDoc {i}.\tT\n" for i in ids))
        first_line = 2  # after the header
    cfg = CorpusConfig(path=str(path), format=fmt)
    with pytest.raises(CorpusError) as err:
        build_blocks_from_config(cfg, tokenizer, tmp_path / "out" / "blocks")
    line = first_line + 2  # the second "a"
    assert str(err.value) == (
        f"{path}:{line}: document id 'a' repeats {path}:{first_line} (3 document(s) repeat an earlier id; ids must "
        "be unique)"
    )
    assert not (tmp_path / "out").exists()


def test_blocks_record_their_tokenizer_and_refuse_another(tokenizer, tmp_path):
    cfg = CorpusConfig(path=str(FIXTURES / "corpus_docs.jsonl"), max_block_length=64)
    out = build_blocks_from_config(cfg, tokenizer, tmp_path / "blocks")
    tokenizer.save_pretrained(tmp_path / "same")
    check_blocks_tokenizer(out, load_tokenizer(tmp_path / "same"))  # the same vocabulary, saved and loaded again
    train_wordpiece(["Other words entirely, in another vocabulary."] * 3, 60, tmp_path / "other", min_frequency=1)
    with pytest.raises(BlocksTokenizerError) as err:
        check_blocks_tokenizer(out, load_tokenizer(tmp_path / "other"))
    message = str(err.value)
    assert message.startswith(f"blocks {out} were cut with tokenizer ") and f"not with {tmp_path / 'other'} " in message


def test_blocks_without_a_tokenizer_record_are_read_with_one_warning(tokenizer, tmp_path, caplog):
    blocks = build_blocks([Document(id="1", title="Ada", text="Ada was here.")], tokenizer, 64, cache_dir=tmp_path)
    old = save_blocks(blocks, tmp_path / "old")  # as `realm blocks` saved them before it recorded the tokenizer
    with caplog.at_level(logging.WARNING, logger="realm.data.blocks"):
        check_blocks_tokenizer(old, tokenizer)
        check_blocks_tokenizer(old, tokenizer)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "have no blocks_manifest.json" in warnings[0]
