"""``bench/copy_vocabulary.py``: the copy-only corpus over N frequent single-wordpiece words."""

from __future__ import annotations

import importlib.util
import json
import sys

from realm.data.vocab import train_wordpiece
from tests.helpers import ROOT

sys.path.insert(0, str(ROOT / "bench"))  # note: the bench imports its sibling ``offline`` first, as a script does
_SPEC = importlib.util.spec_from_file_location("copy_vocabulary", ROOT / "bench" / "copy_vocabulary.py")
copy_vocabulary = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(copy_vocabulary)


def test_the_corpus_draws_its_sentences_from_the_most_frequent_single_wordpiece_words(tmp_path):
    texts = ["The cat sat. The cat ran, the dog sat."] * 20 + ["Zebras graze."]
    tokenizer = train_wordpiece(texts, 60, tmp_path / "tok")
    words = copy_vocabulary.frequent_words(texts, tokenizer, 3)
    assert words == ["the", "cat", "sat"]  # by count; punctuation stripped, lower-cased
    corpus = copy_vocabulary.make_corpus(words, tmp_path / "c.jsonl", num_blocks=50, seed=1)
    records = [json.loads(line) for line in corpus.read_text().splitlines()]
    assert len(records) == 50 and len({r["id"] for r in records}) == 50
    for record in records:
        sentence = record["text"].removesuffix(".").split()
        assert 4 <= len(sentence) <= 6 and set(sentence) <= set(words)
    again = copy_vocabulary.make_corpus(words, tmp_path / "d.jsonl", num_blocks=50, seed=1)
    assert again.read_text() == corpus.read_text()
