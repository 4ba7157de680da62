"""FEVER SUPPORTS spans as cloze: on a hand-made corpus and FEVER lines whose items and skips are known by construction,
only SUPPORTS claims with every evidence page in the corpus are asked, each span masked where the tagger put it, the
evidence page that states it the gold article, every other span and claim counted by the reason it is no item."""

from __future__ import annotations

import json

from experiments.common.title_links import corpus_articles
from experiments.fever.claims import FeverClaim, read_fever_claims
from experiments.fever.cloze_items import FeverClozeConfig, fever_cloze_items, write_fever_cloze
from realm.data.tagging import RuleTagger
from tests.unit.experiments.fever.fever_lines import BLOCKS, LINES

EXPECTED = [  # (claim id, masked span, gold article, gold titles, names_page)
    (1, "Princeton", "Albert Einstein", ["Albert Einstein"], True),
    (1, "1933", "Albert Einstein", ["Albert Einstein"], True),
    (2, "Danube", "Ulm", ["Ulm"], True),
    (3, "Tablets", "Touchscreen", ["Touchscreen"], False),
    (4, "1879", "Ulm", ["Ulm", "Albert Einstein"], True),
]


def _write(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _asked(rows: list[dict]) -> list[tuple]:
    return [(r["claim_id"], r["text"][r["answer_start"] : r["answer_end"]], r["entity"], r["gold_titles"],
             r["names_page"]) for r in rows]  # fmt: skip


def _claims(tmp_path) -> list[FeverClaim]:
    articles = corpus_articles(BLOCKS)
    return read_fever_claims(_write(tmp_path / "dev.jsonl", LINES), {a.title for a in articles.values()})[0]


def test_every_qualifying_span_and_one_item_per_claim(tmp_path):
    items, spans, _ = fever_cloze_items(_claims(tmp_path), corpus_articles(BLOCKS), RuleTagger(), FeverClozeConfig())
    assert _asked(spans) == EXPECTED
    assert [a for a in _asked(items) if a[0] != 1] == EXPECTED[2:]
    assert [a for a in _asked(items) if a[0] == 1] in ([EXPECTED[0]], [EXPECTED[1]])
    assert all(r["text"] == next(line["claim"] for line in LINES if line["id"] == r["claim_id"]) for r in spans)
    assert all(r["source_uid"] == "" and r["title"] == "" for r in spans)  # a claim is no corpus sentence
    assert [r["span_articles"] for r in spans] == [1, 1, 2, 1, 2]


def test_claims_and_spans_that_are_no_item_are_counted_by_reason(tmp_path):
    made = write_fever_cloze(_write(tmp_path / "dev.jsonl", LINES), corpus_articles(BLOCKS), tmp_path / "out",
                             RuleTagger(), FeverClozeConfig())  # fmt: skip
    assert made.counts == {
        "records": 10, "not_enough_info": 1, "supports": 8, "supports_outside_corpus": 1, "claims": 7,
        "no_salient_span": 1, "no_qualifying_span": 2, "items": 4, "spans": 14, "qualifying_spans": 5,
        "span_in_page_title": 6, "span_repeated_in_claim": 2, "span_not_in_evidence": 1, "span_in_many_articles": 0,
    }  # fmt: skip
    items = [json.loads(line) for line in made.items.read_text().splitlines()]
    assert len(items) == 4 and 5 not in {r["claim_id"] for r in items}  # REFUTES never an item
    assert len(made.spans.read_text().splitlines()) == 5
    for row in items:
        assert {"text", "source_uid", "answer_start", "answer_end", "title", "label", "entity"} <= set(row)


def test_a_span_many_articles_state_is_no_item(tmp_path):
    items, _, counts = fever_cloze_items(_claims(tmp_path), corpus_articles(BLOCKS), RuleTagger(),
                                         FeverClozeConfig(max_span_articles=1))  # fmt: skip
    assert {r["claim_id"] for r in items} == {1, 3}  # Danube and 1879 are in two articles each
    assert counts["span_in_many_articles"] == 2 and counts["no_qualifying_span"] == 4


def test_the_item_chosen_for_a_claim_does_not_depend_on_file_order(tmp_path):
    claims, articles = _claims(tmp_path), corpus_articles(BLOCKS)
    forward = fever_cloze_items(claims, articles, RuleTagger(), FeverClozeConfig(seed=3))[0]
    backward = fever_cloze_items(claims[::-1], articles, RuleTagger(), FeverClozeConfig(seed=3))[0]
    assert sorted(map(json.dumps, forward)) == sorted(map(json.dumps, backward))
