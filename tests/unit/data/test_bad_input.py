"""Bad input gets one line naming the file and line (or is counted and skipped where skipping is the documented
choice): sentences without a string text or with a gold answer outside it, bytes that are not UTF-8 in any jsonl file,
an empty corpus."""

from pathlib import Path

import pytest

from realm.core.errors import DataFileError
from realm.data.blocks import build_blocks_from_config, load_blocks
from realm.data.corpus import CorpusConfig
from realm.data.sentences import load_jsonl_dataset
from realm.data.vocab import load_tokenizer
from realm.qa.datasets import load_task
from tests.helpers import make_run


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return load_tokenizer(make_run(tmp_path_factory.mktemp("tok"), num_blocks=2)[2])


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    "data, message",
    [
        (b'{"text": "fine"}\n{"txt": "x"}\n', ":2: field 'text' is missing"),
        (b'{"text": 5}\n', ":1: field 'text' is int, not a string"),
        (b'{"text": "fine"}\n{"text": "bad \xfe"}\n', ":2: not UTF-8 (byte 15 of the line is 0xfe)"),
        (b"", ": no records"),
        (b'{"text": "abc", "answer_start": 0, "answer_end": 1}\n{"text": "Ada was born.", "answer_start": 20, '
         b'"answer_end": 24}\n', ":2: answer span [20, 24) is not inside its sentence of 13 characters"),
        (b'{"text": "Ada was born.", "answer_start": 4, "answer_end": 4}\n',
         ":1: answer span [4, 4) is not inside its sentence of 13 characters"),
        (b'{"text": "Ada was born.", "answer_start": "4", "answer_end": 7}\n',
         ":1: answer_start and answer_end must both be integers (or both null or -1), got '4' and 7"),
    ],
)
def test_bad_sentences_name_the_file_and_line(tmp_path, data, message):
    path = _write(tmp_path / "sentences.jsonl", data)
    with pytest.raises(DataFileError) as err:
        load_jsonl_dataset(path)
    assert str(err.value) == f"{path}{message}"


def test_sentences_without_a_gold_answer_are_fine(tmp_path):
    lines = [b'{"text": "No answer."}', b'{"text": "Absent.", "answer_start": -1, "answer_end": -1}',
             b'{"text": "Null.", "answer_start": null, "answer_end": null}']  # fmt: skip
    path = _write(tmp_path / "sentences.jsonl", b"\n".join(lines) + b"\n")
    assert len(load_jsonl_dataset(path)) == 3


def test_a_corpus_line_that_is_not_utf8_is_reported_or_skipped_and_counted(tmp_path, tokenizer):
    path = _write(tmp_path / "corpus.jsonl", b'{"id": "a", "title": "A", "text": "w1 w2."}\n'
                                             b'{"id": "b", "title": "B", "text": "w3 \xff w4."}\n')  # fmt: skip
    with pytest.raises(DataFileError, match=r"corpus.jsonl:2: not UTF-8"):
        build_blocks_from_config(CorpusConfig(path=str(path)), tokenizer, tmp_path / "blocks")
    out = build_blocks_from_config(CorpusConfig(path=str(path), skip_malformed=True), tokenizer, tmp_path / "blocks")
    assert len(load_blocks(out)) == 1
    assert '"num_malformed": 1' in (out / "corpus_stats.json").read_text()


def test_an_empty_corpus_is_one_clear_error(tmp_path, tokenizer):
    path = _write(tmp_path / "corpus.jsonl", b"\n")
    with pytest.raises(DataFileError, match="corpus.jsonl: no documents to cut into blocks"):
        build_blocks_from_config(CorpusConfig(path=str(path)), tokenizer, tmp_path / "blocks")


def test_a_question_line_that_is_not_utf8_names_its_line(tmp_path):
    path = _write(tmp_path / "q.jsonl", b'{"question": "Who?", "answers": ["A"]}\n{"question": "W\xffho?", "answers": ["B"]}\n')
    with pytest.raises(DataFileError, match=r"q.jsonl:2: not UTF-8"):
        load_task("jsonl", str(path))
