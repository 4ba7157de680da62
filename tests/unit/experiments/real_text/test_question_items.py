"""Questions as cloze: the question then its answer, the answer's characters marked for masking; the linked subset
(the question names an article whose lead states the answer) and the string subset (the answer anywhere in the
corpus), known by construction on ``cloze_corpus``."""

from __future__ import annotations

import json

from experiments.common.title_links import corpus_articles
from experiments.real_text.question_items import cloze_text, question_cloze_items, write_question_cloze
from realm.qa.datasets import QAExample
from tests.unit.experiments.real_text.cloze_corpus import BLOCKS


def _q(question: str, *answers: str) -> QAExample:
    return QAExample(question=question, answers=list(answers), answers_are_regex=False, id=question)


QUESTIONS = [
    _q("where was albert einstein born", "Munich", "ulm"),  # linked: his lead says Ulm (the second answer)
    _q("when did einstein move to princeton", "1933"),  # no title named ("Einstein" alone is none): string only
    _q("who wrote hamlet", "Shakespeare"),  # in no block: neither
    _q("how long is a year on mercury?", "88 days"),  # linked by the bare name of Mercury (planet)
    _q("what city is ulm", "Ulm"),  # the answer is the named title itself: string only
    _q("what did albert einstein write on", "relativity. Einstein"),  # ends one block, opens the next: neither
]


def test_cloze_text_marks_the_answer_after_the_question():
    text, start, end = cloze_text(" who wrote hamlet ", "William Shakespeare")
    assert text == "who wrote hamlet? William Shakespeare" and text[start:end] == "William Shakespeare"
    assert cloze_text("who?", "x")[0] == "who? x"


def test_linked_and_string_subsets_are_the_constructed_ones():
    linked, string = question_cloze_items(QUESTIONS, corpus_articles(BLOCKS))
    assert [(r["question"], r["text"][r["answer_start"] : r["answer_end"]], r["entity"]) for r in linked] == [
        ("where was albert einstein born", "ulm", "Albert Einstein"),
        ("how long is a year on mercury?", "88 days", "Mercury (planet)"),
    ]
    assert [r["question"] for r in string] == [QUESTIONS[i].question for i in (0, 1, 3, 4)]
    assert all(r["entity"] == "" and r["source_uid"] == "" for r in string)
    assert linked[0]["answers"] == ["Munich", "ulm"] and linked[0]["subset"] == "linked"


def test_written_files_hold_the_held_out_cloze_schema(tmp_path):
    made = write_question_cloze(QUESTIONS, corpus_articles(BLOCKS), tmp_path, "toy")
    assert (made.num_questions, made.num_linked, made.num_string) == (6, 2, 4)
    rows = [json.loads(line) for line in made.linked.read_text().splitlines()]
    for row in rows:
        assert {"text", "source_uid", "answer_start", "answer_end", "title", "label", "entity"} <= set(row)
    assert made.string.name == "toy_string.jsonl"
