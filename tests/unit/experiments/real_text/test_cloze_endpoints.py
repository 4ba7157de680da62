"""``experiments/real_text/reachable_cloze.py``'s evaluation (which ``experiments/real_text/question_cloze.py`` shares)
reads any held-out-schema cloze file with a run's model: one outcome per item in file order, gold recall only when every
item names its article."""

from __future__ import annotations

from experiments.common.title_links import corpus_articles
from experiments.real_text import question_cloze as questions
from experiments.real_text import reachable_cloze as reach
from experiments.real_text.question_items import write_question_cloze
from realm.pretrain.saved_run import load_run
from realm.qa.datasets import QAExample
from tests.unit.cli.test_cli import tiny_run  # noqa: F401 - the fixture: a run with a checkpoint and a live index


def test_a_run_reads_the_linked_and_string_sets_one_outcome_per_item(tiny_run, tmp_path):  # noqa: F811
    articles = corpus_articles(load_run(tiny_run).store.blocks)
    titled = [a for a in articles.values() if a.title][:3]
    asked = [QAExample(question=f"what is {a.title}", answers=[a.lead.split()[-2]], answers_are_regex=False,
                       id=str(i)) for i, a in enumerate(titled)]  # fmt: skip
    made = write_question_cloze(asked, articles, tmp_path, "toy")
    assert made.num_linked >= 1 and made.num_string == 3
    result = reach.evaluate_cloze(tiny_run, {"linked": made.linked, "string": made.string})
    linked, string = result["sets"]["linked"], result["sets"]["string"]
    assert result["step"] == 6 and linked["items"] == made.num_linked and string["items"] == 3
    assert len(linked["span_correct"]) == made.num_linked and len(string["closed_book_span_correct"]) == 3
    assert 0 <= linked["gold_recall_at_1"] <= linked["gold_recall_at_k"] <= 1
    assert "gold_recall_at_1" not in string  # string items name no article


def test_question_sets_are_named_name_task_path():
    assert questions.parse_set("nq=nq:/a/b.jsonl") == ("nq", "nq", "/a/b.jsonl")
