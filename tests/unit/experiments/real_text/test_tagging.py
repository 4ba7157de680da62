"""``experiments/real_text/tagging.py``: span agreement of the rule tagger with spaCy's spans."""

from __future__ import annotations

from experiments.real_text import tagging


# Sentence 0: "Mark Twain wrote it in the United States in 1884."; sentence 1: "Acting is old."; sentence 2 has none.
REFERENCES = [[(0, 10, "PERSON"), (23, 40, "GPE"), (44, 48, "DATE")], [], [(0, 5, "DATE")]]
PREDICTIONS = [[(0, 10, "NAME"), (27, 40, "NAME"), (44, 48, "DATE")], [(0, 6, "NAME"), (8, 10, "NUMBER")], []]


def test_match_counts_separates_exact_from_overlapping_spans():
    counts = tagging.match_counts(REFERENCES, PREDICTIONS)
    assert {k: counts[k] for k in ("reference", "predicted", "exact", "partial")} == {
        "reference": 4, "predicted": 5, "exact": 2, "partial": 3,
    }  # fmt: skip
    assert (counts["precision"], counts["recall"], counts["partial_recall"]) == (2 / 5, 2 / 4, 3 / 4)
    assert counts["by_reference_label"] == {
        "DATE": {"n": 2, "exact": 1, "partial": 1},
        "GPE": {"n": 1, "exact": 0, "partial": 1},
        "PERSON": {"n": 1, "exact": 1, "partial": 1},
    }
    assert counts["by_predicted_label"] == {
        "DATE": {"n": 1, "exact": 1}, "NAME": {"n": 3, "exact": 1}, "NUMBER": {"n": 1, "exact": 0},
    }  # fmt: skip


def test_labels_do_not_decide_an_exact_match():
    assert tagging.match_counts([[(3, 9, "GPE")]], [[(3, 9, "NAME")]])["exact"] == 1


def test_match_counts_of_no_spans_are_zero_not_an_error():
    counts = tagging.match_counts([[], []], [[], []])
    assert (counts["reference"], counts["precision"], counts["recall"], counts["partial_recall"]) == (0, 0.0, 0.0, 0.0)


def test_missed_spans_say_whether_a_prediction_overlaps_them():
    missed = tagging.missed_spans(REFERENCES, PREDICTIONS)
    assert missed == [(0, (23, 40, "GPE"), "partial"), (2, (0, 5, "DATE"), "none")]


def test_touching_spans_do_not_overlap():
    assert tagging.missed_spans([[(0, 5, "ORG")]], [[(5, 9, "NAME")]]) == [(0, (0, 5, "ORG"), "none")]


def test_extra_spans_are_explained_by_boundary_context_label_then_position():
    context = [[], [(8, 10, "CARDINAL")], []]
    assert tagging.extra_spans(REFERENCES, PREDICTIONS, context) == [
        (0, (27, 40, "NAME"), "boundary"),
        (1, (0, 6, "NAME"), "sentence-initial"),
        (1, (8, 10, "NUMBER"), "CARDINAL"),
    ]
    assert tagging.extra_spans([[]], [[(4, 8, "NAME")]], [[]]) == [(0, (4, 8, "NAME"), "no entity")]


def test_grouped_examples_keep_k_per_group_most_frequent_first():
    found = [(0, (0, 4, "DATE"), "none"), (1, (0, 3, "GPE"), "partial"), (2, (0, 3, "GPE"), "partial")]
    texts = ["1884 was a year.", "USA is big.", "Ulm is old."]
    groups = tagging.grouped_examples(found, lambda span, why: f"{span[2]}/{why}", texts, k=1)
    assert list(groups) == ["GPE/partial", "DATE/none"]
    assert groups["GPE/partial"] == ["`USA` in …[USA] is big.…"]


def test_stage_scaling_times_each_worker_count_on_the_same_rows(tmp_path):
    from realm.data.tagging import TaggingConfig
    from realm.data.vocab import train_wordpiece

    texts = ["Mark Twain wrote it in the United States in 1884.", "Acting is old.", "Paris lies on the Seine."] * 4
    tokenizer = train_wordpiece(texts, 200, tmp_path / "tok", min_frequency=1)
    rows = tagging.stage_scaling(texts, [1, 1], TaggingConfig(kind="rule"), tokenizer, 5, tmp_path)
    assert [row["workers"] for row in rows] == [1, 1] and all(row["sentences"] == len(texts) for row in rows)
    assert rows[0]["speedup"] == 1.0 and rows[1]["speedup"] > 0 and rows[1]["peak_rss_mib"] > 0
    for i in range(2):  # a fresh cache each time: the second count tags too, it does not read the first's cache
        assert len(list((tmp_path / f"cache-{i}-1").glob("shard-*"))) == 3  # 12 lines in shards of 5
