"""``experiments/common/retrieval_accuracy.py``: which questions a corpus can answer, and DPR's top-k accuracy over
them."""

from __future__ import annotations

import math

import torch

from experiments.common import retrieval_accuracy
from realm.qa.datasets import QAExample


TEXTS = ["Paris is the capital of France.", "Barack Obama was born in Honolulu in 1961.", "The Nile flows north."]


def _q(answers, regex=False):
    return QAExample(question="?", answers=answers, answers_are_regex=regex, id="x")


def test_a_question_is_answerable_when_an_answer_occurs_as_whole_tokens_in_one_block():
    questions = [
        _q(["Honolulu"]), _q(["obama"]), _q(["Bar"]),  # a token prefix is no answer
        _q(["France Barack"]),  # a run across two blocks is no answer
        _q([r"19[56]\d"], regex=True), _q([r"Cairo|Khartoum"], regex=True),
    ]  # fmt: skip
    assert retrieval_accuracy.answerable(questions, TEXTS) == [True, True, False, False, True, False]


def test_top_k_accuracy_over_all_and_over_answerable_questions():
    questions = [_q(["Paris"]), _q(["Honolulu"]), _q(["Tokyo"])]
    rankings = [[0, 1, 2], [2, 0, 1], [2, 1, 0]]  # Paris at rank 1, Honolulu at rank 3, Tokyo nowhere
    row = retrieval_accuracy.accuracy_row(rankings, TEXTS, questions, [True, True, False])
    assert (row["top_1"], row["top_5"], row["top_20"]) == (1 / 3, 2 / 3, 2 / 3)
    assert (row["top_1_answerable"], row["top_5_answerable"]) == (1 / 2, 1.0)
    none = retrieval_accuracy.accuracy_row(rankings, TEXTS, questions, [False] * 3)
    assert math.isnan(none["top_1_answerable"])


def test_dense_rankings_are_exact_inner_product_order():
    docs = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.7, 0.7]])
    queries = torch.tensor([[1.0, 0.1], [0.0, 1.0]])
    assert retrieval_accuracy.dense_rankings(docs, queries, k=3) == [[0, 2, 1], [1, 2, 0]]
