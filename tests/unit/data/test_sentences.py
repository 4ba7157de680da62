"""Pre-training sentence preparation: wordpieces, salient spans, gold spans, truncation; jsonl loading."""

from __future__ import annotations

import json
import logging
import re

import datasets
import pytest

from realm.data.sentences import (
    SENTENCE_FEATURES,
    DataFileError,
    char_span_to_wordpieces,
    load_jsonl_dataset,
    num_without_salient_spans,
    prepare_sentences,
    split_sentences,
)
from realm.data.vocab import train_wordpiece

TEXTS = [
    "Ada Lovelace met Charles Babbage in London in 1833.",
    "The Analytical Engine was designed by Charles Babbage.",
    "Nothing salient is mentioned here at all.",
    "In 1843 Ada Lovelace published notes on the engine in New York.",
]


class PhraseTagger:
    """Tags every occurrence of fixed phrases; a stand-in for ``realm.data.tagging`` taggers."""

    def __init__(self, phrases: list[str]) -> None:
        self.pattern = re.compile("|".join(re.escape(p) for p in phrases))
        self.num_calls = 0

    def tag(self, texts: list[str]) -> list[list[tuple[int, int, str]]]:
        self.num_calls += 1
        return [[(m.start(), m.end(), "NAME") for m in self.pattern.finditer(text)] for text in texts]


TAGGER = PhraseTagger(["Ada Lovelace", "Charles Babbage", "London", "1833", "1843", "New York"])


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return train_wordpiece(TEXTS * 3, 150, tmp_path_factory.mktemp("vocab"), min_frequency=1)


def records(rows: list[dict]) -> datasets.Dataset:
    return datasets.Dataset.from_list(rows)


def test_split_sentences_partitions_text_and_keeps_initials():
    text = 'Evan L. Morris (born 1977) was a lobbyist. He moved to Washington, D.C. in 2005!  "Yes." Then\nmore'
    spans = split_sentences(text)
    assert [text[s:e] for s, e in spans] == [
        "Evan L. Morris (born 1977) was a lobbyist.",
        "He moved to Washington, D.C. in 2005!",
        '"Yes."',
        "Then",
        "more",
    ]
    # every non-space character is in exactly one span, in order
    assert all(e1 <= s2 for (_, e1), (s2, _) in zip(spans, spans[1:]))
    assert "".join("".join(text[s:e].split()) for s, e in spans) == "".join(text.split())


def test_salient_spans_decode_to_the_lowercased_span_text(tokenizer):
    prepared = prepare_sentences(records([{"text": t} for t in TEXTS]), tokenizer, TAGGER, 64)
    assert prepared.features == SENTENCE_FEATURES
    for row in prepared:
        expected = [m.group(0).lower() for m in TAGGER.pattern.finditer(row["text"])]
        decoded = [tokenizer.decode(row["input_ids"][s:e]) for s, e in row["salient_spans"]]
        assert decoded == expected
    assert prepared[0]["input_ids"] == tokenizer(TEXTS[0], add_special_tokens=False)["input_ids"]


def test_char_span_overlapping_part_of_a_word_takes_the_whole_wordpiece():
    offsets = [(0, 3), (3, 5), (6, 11)]  # "abc" "##de" "fghij"
    assert char_span_to_wordpieces(offsets, 4, 8, limit=3) == (1, 3)
    assert char_span_to_wordpieces(offsets, 5, 6, limit=3) is None  # only whitespace
    assert char_span_to_wordpieces(offsets, 6, 11, limit=2) is None  # beyond the truncation


def test_truncation_drops_spans_partly_or_wholly_outside(tokenizer):
    text = TEXTS[3]  # "In 1843 Ada Lovelace ... in New York."
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    ny_start = len(tokenizer(text[: text.index("New York")], add_special_tokens=False)["input_ids"])
    # Keep exactly the first wordpiece of "New York": that span is cut, the earlier ones stay.
    prepared = prepare_sentences(records([{"text": text}]), tokenizer, TAGGER, ny_start + 1 + 2)
    row = prepared[0]
    assert row["input_ids"] == ids[: ny_start + 1]
    assert [tokenizer.decode(row["input_ids"][s:e]) for s, e in row["salient_spans"]] == ["1843", "ada lovelace"]
    assert all(e <= len(row["input_ids"]) for _, e in row["salient_spans"])
    # With room for the whole of "New York" it is kept.
    whole = prepare_sentences(records([{"text": text}]), tokenizer, TAGGER, len(ids) + 2)[0]
    assert len(whole["salient_spans"]) == 3


def test_input_ids_are_truncated_to_max_query_length_minus_two(tokenizer):
    prepared = prepare_sentences(records([{"text": t} for t in TEXTS]), tokenizer, TAGGER, 8)
    assert all(len(ids) <= 6 for ids in prepared["input_ids"])


def test_gold_span_maps_answer_offsets_and_defaults_to_minus_one(tokenizer):
    text = TEXTS[0]
    start = text.index("London")
    rows = [
        {"text": text, "source_uid": "u1", "answer_start": start, "answer_end": start + len("London")},
        {"text": text, "source_uid": None, "answer_start": None, "answer_end": None},
        {"text": text, "source_uid": "u3", "answer_start": -1, "answer_end": -1},
    ]
    prepared = prepare_sentences(records(rows), tokenizer, None, 64)
    s, e = prepared[0]["gold_span"]
    assert tokenizer.decode(prepared[0]["input_ids"][s:e]) == "london"
    assert prepared[1]["gold_span"] == [-1, -1] and prepared[2]["gold_span"] == [-1, -1]
    assert prepared["source_uid"] == ["u1", "", "u3"]
    # A gold answer cut by truncation is no gold span at all.
    cut = prepare_sentences(records(rows[:1]), tokenizer, None, 4)
    assert cut[0]["gold_span"] == [-1, -1]


def test_sentences_without_spans_are_kept_counted_and_logged(tokenizer, caplog):
    with caplog.at_level(logging.INFO, logger="realm.data.sentences"):
        prepared = prepare_sentences(records([{"text": t, "source": "wiki"} for t in TEXTS]), tokenizer, TAGGER, 64)
    assert len(prepared) == len(TEXTS) and prepared[2]["salient_spans"] == []
    assert num_without_salient_spans(prepared) == 1
    assert "1 have no salient span" in caplog.text
    assert set(prepared.column_names) == set(SENTENCE_FEATURES) and prepared["source_uid"] == [""] * 4


def test_no_tagger_leaves_spans_empty(tokenizer):
    prepared = prepare_sentences(records([{"text": t} for t in TEXTS]), tokenizer, None, 64)
    assert num_without_salient_spans(prepared) == len(TEXTS)


def test_tagging_runs_in_batches(tokenizer):
    tagger = PhraseTagger(["London"])
    prepare_sentences(records([{"text": t} for t in TEXTS * 5]), tokenizer, tagger, 64, batch_size=8)
    assert tagger.num_calls == 3  # 20 sentences in batches of 8


def test_prepare_sentences_rejects_bad_inputs(tokenizer):
    with pytest.raises(ValueError, match="'text' column"):
        prepare_sentences(records([{"sentence": "x"}]), tokenizer, None, 64)
    with pytest.raises(ValueError, match="answer_end"):
        prepare_sentences(records([{"text": "x", "answer_start": 0}]), tokenizer, None, 64)


def test_load_jsonl_dataset_reads_records_and_names_bad_lines(tmp_path):
    good = tmp_path / "s.jsonl"
    good.write_text(json.dumps({"text": "A.", "source_uid": "u"}) + "\n\n" + json.dumps({"text": "B."}) + "\n")
    loaded = load_jsonl_dataset(good, cache_dir=tmp_path / "cache")
    assert loaded["text"] == ["A.", "B."] and loaded["source_uid"] == ["u", None]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "A."}) + "\n" + "[1, 2]\n")
    with pytest.raises(DataFileError, match=r"bad\.jsonl:2: expected a JSON object"):
        load_jsonl_dataset(bad)
    bad.write_text(json.dumps({"text": "A."}) + "\n" + '{"text": "unterminated\n')
    with pytest.raises(DataFileError, match=r"bad\.jsonl:2: invalid JSON"):
        load_jsonl_dataset(bad)
    with pytest.raises(FileNotFoundError, match="absent.jsonl"):
        load_jsonl_dataset(tmp_path / "absent.jsonl")


def test_no_tagger_is_no_warning(tokenizer, caplog):
    """Gold-span files are prepared without a tagger: their empty salient spans are by design, not a problem."""
    with caplog.at_level(logging.INFO, logger="realm.data.sentences"):
        prepare_sentences(records([{"text": t} for t in TEXTS]), tokenizer, None, 64)
    assert "without a tagger" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
