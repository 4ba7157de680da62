"""QA predictions as a W&B table in long format: one row per question x retrieved block (its top ones), so the table
can be filtered by rank or grouped by ``has_answer`` (``predictions.jsonl`` keeps one question a line)."""

from __future__ import annotations

from typing import Any, Mapping

PREDICTIONS_KEY = "eval/predictions"
PREDICTION_COLUMNS = ("question_id", "question", "answers", "prediction", "correct", "prediction_title")
"""The question's columns, repeated on each of its rows."""
BLOCK_COLUMNS = ("rank", "block_id", "title", "score", "has_answer", "is_prediction_block")
"""The retrieved block's columns (``rank`` 0 = the retriever's best); None on the one row of a question that
retrieved nothing."""


def prediction_rows(records: list[Mapping[str, Any]], num_blocks: int = 5) -> tuple[list[str], list[list[Any]]]:
    """``(columns, data)`` of a QA predictions table: for each question (``records`` from ``realm.qa.qa_eval``; its
    position is ``question_id``), one row per block among its top ``num_blocks`` with the block's title, retriever
    score, whether it contains an answer and whether the prediction was read from it."""
    data = []
    for i, r in enumerate(records):
        block_ids, titles = r["block_ids"], r["titles"]
        predicted = r["prediction_block"]
        title = titles[block_ids.index(predicted)] if predicted in block_ids else ""
        question = [i, r["question"], " | ".join(r["answers"]), r["prediction"], r["correct"], title]
        ranks = range(min(num_blocks, len(titles)))
        blocks = [[k, block_ids[k], titles[k], r["scores"][k], r["has_answer"][k], block_ids[k] == predicted]
                  for k in ranks]  # fmt: skip
        data.extend([*question, *block] for block in blocks or [[None] * len(BLOCK_COLUMNS)])
    return [*PREDICTION_COLUMNS, *BLOCK_COLUMNS], data
