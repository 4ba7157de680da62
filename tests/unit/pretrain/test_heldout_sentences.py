"""Sentences held out one by one are never training data: ``prepared_sentences(exclude=)`` (the path X takes to the
trainer) and ``prepare_sentences(exclude=)`` skip them, count the skip, and cache apart from the unfiltered X."""

from __future__ import annotations

import json
import logging

import datasets
import pytest

from realm.data.articles import write_article_list
from realm.data.sentences import prepare_sentences
from realm.data.vocab import train_wordpiece
from realm.pretrain.data import HELDOUT_SENTENCES_FILE, prepared_sentences

TEXTS = [
    "Ulm is the birthplace of Albert Einstein, born in 1879.",
    "Einstein moved to Princeton in 1933.",
    "The Danube passes the city of Ulm.",
]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return train_wordpiece(TEXTS * 3, 200, tmp_path_factory.mktemp("vocab"), min_frequency=1)


def test_x_prepared_for_training_skips_the_listed_sentences(tmp_path, tokenizer, caplog):
    x = tmp_path / "pretrain.jsonl"
    x.write_text("".join(json.dumps({"text": t, "source_uid": f"u{i}"}) + "\n" for i, t in enumerate(TEXTS)))
    listed = write_article_list(tmp_path / HELDOUT_SENTENCES_FILE, [TEXTS[0], "A sentence X does not have."])
    everything = prepared_sentences(str(x), tokenizer, None, 32, tmp_path / "cache")
    assert everything["text"] == TEXTS
    with caplog.at_level(logging.INFO, logger="realm.data.sentences"):
        training = prepared_sentences(str(x), tokenizer, None, 32, tmp_path / "cache", exclude=str(listed))
    assert training["text"] == TEXTS[1:] and training["source_uid"] == ["u1", "u2"]
    assert "skipped 1 of 3 sentences held out one by one (2 listed)" in caplog.text
    # the cache keeps both; a changed list is a new key (its stamp), never the stale filtered set
    assert prepared_sentences(str(x), tokenizer, None, 32, tmp_path / "cache")["text"] == TEXTS
    write_article_list(listed, [TEXTS[2]])
    again = prepared_sentences(str(x), tokenizer, None, 32, tmp_path / "cache", exclude=str(listed))
    assert again["text"] == TEXTS[:2]


def test_prepare_sentences_skips_excluded_texts_whatever_their_surrounding_space(tokenizer):
    records = datasets.Dataset.from_list([{"text": t} for t in TEXTS])
    prepared = prepare_sentences(records, tokenizer, None, 32, exclude=[f"  {TEXTS[1]} "])
    assert prepared["text"] == [TEXTS[0], TEXTS[2]]
