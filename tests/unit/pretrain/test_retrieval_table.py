"""Retrieval tables (``realm.pretrain.retrieval_table``): the rows of a batch, their flattening, and the JSONL log."""

import json
import math

from realm.pretrain.retrieval_table import (
    EMPTY_TITLE,
    NULL_TITLE,
    contains_answer,
    slot_rows,
    log_retrieval_table,
    retrieval_rows,
)
from realm.run.layout import RETRIEVALS_FILE
from tests.unit.conftest import BLOCKS, QUERIES


def test_contains_answer_normalises_case_accents_punctuation_and_word_boundaries():
    assert contains_answer("Born in the U.S. in 1990", "u . s .")
    assert contains_answer("Café  de\nFlore", "cafe de flore")
    assert not contains_answer("A franchise", "france")
    assert not contains_answer("Grandstand", "stand")
    assert not contains_answer("anything", "")


def test_rows_describe_each_query_and_slot(rows, batch_and_output):
    batch, output = batch_and_output
    assert len(rows) == 2
    assert [r["gold"] for r in rows] == [a for _, a in QUERIES]
    assert rows[0]["query"].startswith("paris is the capital of [MASK]")
    assert not any(t in r["query"] for r in rows for t in ("[CLS]", "[SEP]", "[PAD]"))
    assert rows[0]["prediction"] == "france" and rows[0]["correct"]
    assert not rows[1]["correct"]
    assert rows[0]["step"] == 6 and rows[0]["index_version"] == 4 and rows[0]["staleness"] == 2
    assert [r["example_id"] for r in rows] == [10, 11]
    for b, row in enumerate(rows):
        slots = row["slots"]
        assert len(slots) == 4
        assert slots[0]["title"] == NULL_TITLE and slots[0]["block_id"] == -1 and not slots[0]["has_gold"]
        assert math.isclose(sum(s["p_z"] for s in slots), 1.0, rel_tol=1e-5)
        for k, slot in enumerate(slots):
            mask = batch.target_mask[b].float()
            expected = math.exp(float((output.token_log_probs[b, k] * mask).sum()))
            assert math.isclose(slot["p_y"], expected, rel_tol=1e-5)
    assert [s["title"] for s in rows[0]["slots"]] == [NULL_TITLE, "France", "Germany", EMPTY_TITLE]
    assert rows[0]["slots"][3]["p_z"] < 1e-6
    assert [s["has_gold"] for s in rows[0]["slots"]] == [False, True, False, False]
    assert [s["title"] for s in rows[1]["slots"]] == [NULL_TITLE, "Germany", "Franchise", "France"]
    assert [s["has_gold"] for s in rows[1]["slots"]] == [False, True, False, False]
    assert rows[0]["slots"][1]["snippet"] == BLOCKS[0][1][:120]


def test_max_rows_and_long_format(batch_and_output, store, tokenizer, rows):
    batch, output = batch_and_output
    one = retrieval_rows(batch, output, store, tokenizer, index_version=0, staleness=0, step=1, max_rows=1)
    assert len(one) == 1
    long = slot_rows(rows[0])
    assert len(long) == len(rows[0]["slots"]) == 4  # one row per slot, the null document's first
    assert all("slots" not in r for r in long)
    assert [r["slot"] for r in long] == [0, 1, 2, 3]
    assert [r["title"] for r in long] == [NULL_TITLE, "France", "Germany", EMPTY_TITLE]
    assert [r["has_gold"] for r in long] == [False, True, False, False]
    assert all(r["query"] == rows[0]["query"] and r["example_id"] == rows[0]["example_id"] for r in long)
    assert [r["p_z"] for r in long] == [s["p_z"] for s in rows[0]["slots"]]
    json.dumps(rows)  # plain python values only


def test_log_retrieval_table_without_trackers_appends_jsonl(rows, tmp_path):
    class _Acc:
        is_main_process = True
        trackers = []

    log_retrieval_table(_Acc(), rows, step=6, run_dir=tmp_path)
    log_retrieval_table(_Acc(), rows[:1], step=7, run_dir=tmp_path)
    lines = (tmp_path / RETRIEVALS_FILE).read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[0])["slots"][1]["title"] == "France"
