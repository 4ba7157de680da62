"""``realm.data.copy_corpus``: copy-only corpora over the N most frequent single-wordpiece words of a corpus."""

from __future__ import annotations

import json

import pytest

from realm.data.copy_corpus import frequent_words, write_copy_corpus
from realm.data.vocab import train_wordpiece

TEXTS = ["The cat sat. The cat ran, the dog sat."] * 20 + ["Zebras graze."]


def test_the_corpus_draws_its_sentences_from_the_most_frequent_single_wordpiece_words(tmp_path):
    tokenizer = train_wordpiece(TEXTS, 60, tmp_path / "tok")
    words = frequent_words(TEXTS, tokenizer, 3)
    assert words == ["the", "cat", "sat"]  # by count; punctuation stripped, lower-cased
    corpus = write_copy_corpus(words, tmp_path / "c.jsonl", num_blocks=50, seed=1)
    records = [json.loads(line) for line in corpus.read_text().splitlines()]
    assert len(records) == 50 and len({r["id"] for r in records}) == 50
    for record in records:
        sentence = record["text"].removesuffix(".").split()
        assert 4 <= len(sentence) <= 6 and set(sentence) <= set(words)
    again = write_copy_corpus(words, tmp_path / "d.jsonl", num_blocks=50, seed=1)
    assert again.read_text() == corpus.read_text()
    assert write_copy_corpus(words, tmp_path / "e.jsonl", num_blocks=50, seed=2).read_text() != corpus.read_text()
    several = [json.loads(line)["text"] for line in write_copy_corpus(words, tmp_path / "s.jsonl", 5, 1, sentences=4)
               .read_text().splitlines()]  # fmt: skip
    assert len(several) == 5 and all(len(text.split(". ")) == 4 for text in several)


def test_zero_words_means_every_single_wordpiece_word_and_too_many_is_refused(tmp_path):
    tokenizer = train_wordpiece(TEXTS, 60, tmp_path / "tok")
    every = frequent_words(TEXTS, tokenizer, 0)
    single = {w for w in {"the", "cat", "sat", "ran", "dog", "zebras", "graze"} if len(tokenizer.tokenize(w)) == 1}
    assert every[:3] == ["the", "cat", "sat"] and set(every) == single
    with pytest.raises(ValueError, match=f"only {len(every)} single-wordpiece words in the corpus, asked for 99"):
        frequent_words(TEXTS, tokenizer, 99)
    with pytest.raises(ValueError, match="at least one word"):
        write_copy_corpus([], tmp_path / "f.jsonl")
    with pytest.raises(ValueError, match="sentences must be >= 1"):
        write_copy_corpus(["a"], tmp_path / "f.jsonl", sentences=0)
