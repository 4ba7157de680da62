"""FEVER SUPPORTS spans as cloze: on a hand-made corpus and FEVER lines whose items and skips are known by construction,
only SUPPORTS claims with every evidence page in the corpus are asked, each span masked where the tagger put it, the
evidence page that states it the gold article, every other span and claim counted by the reason it is no item."""

from __future__ import annotations

import json

import datasets

from realm.data.fever import FeverClaim, read_fever_claims
from realm.data.tagging import RuleTagger
from realm.pretrain.fever_cloze import FeverClozeConfig, fever_cloze_items, write_fever_cloze
from realm.pretrain.title_links import corpus_articles

BLOCKS = datasets.Dataset.from_dict({
    "doc_id": ["ein", "ein", "ulm", "mer", "tou", "dan"],
    "title": ["Albert Einstein", "Albert Einstein", "Ulm", "Mercury (planet)", "Touchscreen", "Danube"],
    "text": [
        "Albert Einstein was a physicist born in Ulm in 1879.",
        "Einstein moved to Princeton in 1933.",
        "Ulm is a city on the Danube, where Albert Einstein was born in 1879.",
        "Mercury is the smallest planet, with a year of 88 days.",
        "A touchscreen is a screen used in Tablets since 1965.",
        "The Danube passes Ulm. Fritz Kreisler played there.",
    ],
    "uid": ["u0", "u1", "u2", "u3", "u4", "u5"],
})  # fmt: skip


def _line(id_: int, label: str, claim: str, *evidence_sets: list[str]) -> dict:
    sets = [[[9, 9, page, 0] for page in pages] for pages in evidence_sets] or [[[9, None, None, None]]]
    return {"id": id_, "verifiable": "VERIFIABLE", "label": label, "claim": claim, "evidence": sets}


S, R = "SUPPORTS", "REFUTES"
LINES = [
    _line(1, S, "Albert Einstein moved to Princeton in 1933.", ["Albert_Einstein"]),  # two spans qualify: one item
    _line(2, S, "Ulm lies on the Danube.", ["Ulm"]),  # "Ulm" is the page's title: "Danube"
    _line(3, S, "Touchscreens are used in Tablets.", ["Touchscreen"]),  # the title's plural is no item: "Tablets"
    _line(4, S, "Ulm saw a physicist born in 1879.", ["Ulm"], ["Albert_Einstein"]),  # both pages state 1879
    _line(5, R, "Einstein moved to Princeton.", ["Albert_Einstein"]),  # would qualify, but REFUTES
    _line(6, "NOT ENOUGH INFO", "Ulm has a zoo."),
    _line(7, S, "Hamlet was written by William Shakespeare.", ["Hamlet"]),  # no such page in the corpus
    _line(8, S, "the danube is long.", ["Danube"]),  # no salient span
    _line(9, S, "Albert Einstein admired Fritz Kreisler.", ["Albert_Einstein"]),  # Kreisler only in Danube's block
    _line(10, S, "The year of Mercury is 88 days, not 88 weeks.", ["Mercury_-LRB-planet-RRB-"]),  # 88 twice
]
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
