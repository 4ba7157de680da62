"""``experiments/real_text/heldout_reachability.py`` splits the held-out cloze by whether the masked span was in a block
the reader read: the split must follow the retrieved ids and the word-boundary rule, and never count the sentence's own
article."""

from __future__ import annotations

import numpy as np

from experiments.real_text import heldout_reachability as reach
from realm.pretrain.heldout_eval import HeldoutOutcomes


TEXTS = ["Paris France the capital", "Berlin Germany in 1945", "Parisian cafes", "Rome Italy"]
TITLES = ["France", "Germany", "Cafe", "Italy"]


def test_a_span_is_present_only_in_the_blocks_read_and_only_on_word_boundaries():
    retrieved = np.array([[2, 3], [1, -1], [0, 3], [-1, -1]])
    present = reach.span_present(retrieved, ["Paris", "1945", "Paris", "Rome"], TEXTS)
    # "Parisian" is not "Paris"; an empty slot (-1) reads nothing, so row 3 never finds Rome
    assert present.tolist() == [False, True, True, False]


def test_elsewhere_excludes_the_sentences_own_article_and_empty_spans():
    found = reach.span_elsewhere(["Paris", "Paris", "Italy", ""], ["France", "Cafe", "Germany", "Italy"], TEXTS, TITLES)
    assert found.tolist() == [False, True, True, False]


def test_the_split_accuracies_are_the_means_over_each_side():
    out = HeldoutOutcomes(span_correct=np.array([True, False, True, False]),
                          closed_book_span_correct=np.array([False, False, True, False]),
                          retrieved=np.zeros((4, 2), dtype=np.int64), tokens_correct=0, closed_book_tokens_correct=0,
                          num_tokens=4)  # fmt: skip
    row = reach.reachability_row(out, np.array([True, True, True, False]))
    assert row["span_present"] == 0.75 and row["accuracy"] == 0.5
    assert np.isclose(row["accuracy_present"], 2 / 3) and row["accuracy_absent"] == 0.0
    assert np.isclose(row["closed_book_present"], 1 / 3) and row["closed_book_absent"] == 0.0
    assert reach.reachability_row(out, np.zeros(4, dtype=bool))["accuracy_present"] is None
