"""Reachable held-out cloze: a sentence is an item when it names another article whose block states one of its
salient spans (strict: the exact title and the lead block; loose: any case or the bare name, and any block); its
sentence is held out of X. Expected items are known by construction (``cloze_corpus``)."""

from __future__ import annotations

import json

import pytest

from experiments.common.title_links import TitleLinker, corpus_articles
from experiments.real_text.reachable_items import ReachableClozeConfig, find_reachable_items, write_reachable_cloze
from tests.unit.experiments.real_text.cloze_corpus import BLOCKS, ITEMS, FakeTagger


def test_title_linker_exact_and_loose_rules():
    articles = corpus_articles(BLOCKS)
    exact, loose = TitleLinker(articles, loose=False), TitleLinker(articles, loose=True)
    text = "the planet mercury and Mercury, Ulm and the Ulmer press, ALBERT EINSTEIN and Albert Einstein."
    found = lambda linker: [(text[s:e], key) for s, e, key in linker.mentions(text)]  # noqa: E731
    assert found(exact) == [("Ulm", "Ulm"), ("Albert Einstein", "Albert Einstein")]
    assert found(loose) == [
        ("mercury", "Mercury (planet)"), ("Mercury", "Mercury (planet)"), ("Ulm", "Ulm"),
        ("ALBERT EINSTEIN", "Albert Einstein"), ("Albert Einstein", "Albert Einstein"),
    ]  # fmt: skip
    assert TitleLinker(articles, loose=False, min_title_chars=4).mentions("Ulm") == []


def test_strict_and_loose_items_are_the_constructed_ones():
    items, counts = find_reachable_items(BLOCKS, FakeTagger(), ReachableClozeConfig())
    found = {item["text"]: item for item in items}
    assert set(found) == set(ITEMS)
    for text, (spans, entity, tier) in ITEMS.items():
        item = found[text]
        assert item["text"][item["answer_start"] : item["answer_end"]] in spans
        assert (item["entity"], item["tier"]) == (entity, tier)
        assert entity in item["gold_titles"]
    assert counts["strict"] == 2 and counts["loose"] == 4
    ulm = found["Ulm is the birthplace of Albert Einstein, born in 1879."]
    assert (ulm["title"], ulm["source_uid"]) == ("Ulm", "u2")  # its own article, whose blocks evaluation skips


def test_spans_stated_by_more_articles_than_the_limit_are_no_items():
    """1879 is in three articles' blocks, Albert Einstein in five; 1933 and 88 days in two each."""
    items, counts = find_reachable_items(BLOCKS, FakeTagger(), ReachableClozeConfig(max_span_articles=2))
    assert {item["text"] for item in items} == {t for t, v in ITEMS.items() if v[2] == "loose"}
    assert counts["strict"] == 0 and {item["span_articles"] for item in items} == {2}
    unlimited, _ = find_reachable_items(BLOCKS, FakeTagger(), ReachableClozeConfig(max_span_articles=0))
    assert len(unlimited) == len(ITEMS)


def test_the_lead_block_and_exact_name_make_strict(tmp_path):
    """Moving 1933 into the lead makes the Princeton sentence strict; a lower-case mention never is."""
    lead_first = BLOCKS.map(lambda row, i: {"text": BLOCKS[1 - i]["text"] if i < 2 else row["text"]},
                            with_indices=True)  # fmt: skip
    items, _ = find_reachable_items(lead_first, FakeTagger(), ReachableClozeConfig())
    tiers = {item["text"]: item["tier"] for item in items}
    assert tiers["The physicist Albert Einstein came to Princeton in 1933."] == "strict"
    assert tiers["The innermost planet mercury has a year of 88 days."] == "loose"
    # Einstein's sentence naming Ulm is now in his second block; it is still his own article's, still an item
    assert tiers["Albert Einstein was a physicist born in Ulm in 1879."] == "strict"


def test_written_sets_and_x_without_the_held_out_sentences(tmp_path):
    x = tmp_path / "x.jsonl"
    kept = "Einstein moved to Princeton in 1933."
    x.write_text("".join(json.dumps({"text": t, "source_uid": "u"}) + "\n" for t in [*ITEMS, kept]))
    sets = write_reachable_cloze(BLOCKS, tmp_path / "out", FakeTagger(), ReachableClozeConfig(), x)
    strict = [json.loads(line) for line in sets.strict.read_text().splitlines()]
    loose = [json.loads(line) for line in sets.loose.read_text().splitlines()]
    assert {r["text"] for r in strict} == {t for t, v in ITEMS.items() if v[2] == "strict"}
    assert {r["text"] for r in loose} == set(ITEMS)
    assert set(sets.heldout_sentences.read_text().splitlines()) == set(ITEMS)
    assert [json.loads(line)["text"] for line in sets.pretrain.read_text().splitlines()] == [kept]
    assert sets.num_pretrain_skipped == len(ITEMS)


def test_a_corpus_without_items_is_refused(tmp_path):
    class NoSpans:
        def tag(self, texts):
            return [[] for _ in texts]

    with pytest.raises(ValueError, match="no reachable cloze item"):
        write_reachable_cloze(BLOCKS, tmp_path, NoSpans(), ReachableClozeConfig())
