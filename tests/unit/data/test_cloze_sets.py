"""Cloze sets of a real corpus: X from the training articles' blocks, held-out sentences of held-out articles with one
tagged salient span each, both carrying their block's uid (the trivial-retrieval filter), and the list of the held-out
articles that the warm-start jobs skip. An article is the blocks sharing a title (``realm.data.articles``)."""

from __future__ import annotations

import json

import datasets
import pytest

from realm.data.cloze_sets import MIN_WORDS, choose_heldout_articles, every_span_sentences, write_cloze_sets
from realm.data.tagging import RuleTagger

BLOCKS = datasets.Dataset.from_dict({
    "doc_id": ["ada", "ada", "rome", "oslo"],
    "title": ["Ada Lovelace", "Ada Lovelace", "Rome", "Oslo"],
    "text": [
        "Ada Lovelace was born in London in 1815. She wrote notes.",
        "Charles Babbage designed the Analytical Engine with her help.",
        "Rome was founded in 753 BC by Romulus. See also.",
        "Oslo is the capital of Norway since 1814.",
    ],
    "uid": ["u0", "u1", "u2", "u3"],
})


def _read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_held_out_articles_are_a_seeded_choice_that_ignores_input_order():
    ids = [f"d{i}" for i in range(50)]
    chosen = choose_heldout_articles(ids, 5, seed=3)
    assert len(chosen) == 5 and chosen <= set(ids)
    assert choose_heldout_articles(reversed(ids), 5, seed=3) == chosen
    assert choose_heldout_articles(ids, 5, seed=4) != chosen
    with pytest.raises(ValueError, match="cannot hold out 50 of 50"):
        choose_heldout_articles(ids, 50, seed=0)


def test_x_holds_the_training_articles_sentences_and_the_held_out_set_one_tagged_span_each(tmp_path):
    sets = write_cloze_sets(BLOCKS, tmp_path, {"Ada Lovelace"}, RuleTagger(), seed=0)
    x = _read(sets.pretrain)
    # "She wrote notes." and "See also." are under MIN_WORDS words: neither fact nor query
    assert [r["text"] for r in x] == [
        "Rome was founded in 753 BC by Romulus.", "Oslo is the capital of Norway since 1814."
    ]
    assert [r["source_uid"] for r in x] == ["u2", "u3"]
    assert sets.num_short == 2 and MIN_WORDS == 4
    heldout = _read(sets.heldout)
    assert [r["source_uid"] for r in heldout] == ["u0", "u1"] and sets.num_heldout == 2
    for record in heldout:
        span = record["text"][record["answer_start"] : record["answer_end"]]
        spans = [record["text"][s:e] for s, e, _ in RuleTagger().tag([record["text"]])[0]]
        assert span in spans and record["title"] == "Ada Lovelace"
        assert "entity" not in record  # the own article is excluded: the title is no gold article for recall
    assert sets.heldout_articles.read_text() == "Ada Lovelace\n"
    again = write_cloze_sets(BLOCKS, tmp_path / "again", {"Ada Lovelace"}, RuleTagger(), seed=0)
    assert _read(again.heldout) == heldout  # the same spans for the same seed


def test_held_out_sentences_without_a_span_are_counted_and_a_set_with_none_is_refused(tmp_path):
    class NoSpans:
        def tag(self, texts):
            return [[] for _ in texts]

    with pytest.raises(ValueError, match="the 1 held-out articles gave no sentence with a salient span"):
        write_cloze_sets(BLOCKS, tmp_path, {"Oslo"}, NoSpans(), seed=0)
    sets = write_cloze_sets(BLOCKS, tmp_path, {"Ada Lovelace", "Oslo"}, RuleTagger(), seed=0, max_heldout=2)
    assert sets.num_heldout + sets.num_heldout_without_span == 2


def test_dpr_passages_sharing_a_title_are_held_out_together(tmp_path):
    """DPR's passages have an id each and their article's title: holding out the article holds out every passage."""
    passages = BLOCKS.map(lambda row, i: {"doc_id": str(1000 + i)}, with_indices=True)
    sets = write_cloze_sets(passages, tmp_path, {"Ada Lovelace"}, RuleTagger(), seed=0)
    assert [r["source_uid"] for r in _read(sets.pretrain)] == ["u2", "u3"]
    assert [r["source_uid"] for r in _read(sets.heldout)] == ["u0", "u1"]


class _NamesTagger:
    """Tags every capitalised word after the first, as (start, end, "NAME")."""

    def tag(self, texts):
        import re

        return [[(m.start(), m.end(), "NAME") for m in re.finditer(r"(?<=\s)[A-Z]\w+", t)] for t in texts]


def test_every_span_of_every_sentence_of_the_chosen_articles_is_a_row():
    rows = every_span_sentences(BLOCKS, {"Ada Lovelace", "Oslo"}, _NamesTagger())
    asked = [(r["title"], r["text"][r["answer_start"] : r["answer_end"]], r["source_uid"]) for r in rows]
    assert asked == [
        ("Ada Lovelace", "Lovelace", "u0"), ("Ada Lovelace", "London", "u0"),
        ("Ada Lovelace", "Babbage", "u1"), ("Ada Lovelace", "Analytical", "u1"), ("Ada Lovelace", "Engine", "u1"),
        ("Oslo", "Norway", "u3"),
    ]  # fmt: skip
    # "She wrote notes." is under MIN_WORDS words; Rome is not asked for
    assert MIN_WORDS == 4 and all(r["title"] != "Rome" for r in rows)
