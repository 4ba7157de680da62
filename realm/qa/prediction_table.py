"""QA predictions as a table (W&B) with the top retrieved blocks of each question."""

from __future__ import annotations

from typing import Any, Mapping

PREDICTIONS_KEY = "eval/predictions"
PREDICTION_COLUMNS = ("question", "answers", "prediction", "correct", "prediction_title")


def prediction_rows(records: list[Mapping[str, Any]], num_blocks: int = 5) -> tuple[list[str], list[list[Any]]]:
    """A QA predictions table: the question, gold answers, prediction and, for the top ``num_blocks`` retrieved
    blocks, title, retriever score and whether it has an answer (``records`` from ``realm.qa.qa_eval``)."""
    columns = [*PREDICTION_COLUMNS]
    for k in range(num_blocks):
        columns += [f"block{k}_title", f"block{k}_score", f"block{k}_has_answer"]
    data = []
    for r in records:
        titles = r["titles"]
        title = titles[r["block_ids"].index(r["prediction_block"])] if r["prediction_block"] in r["block_ids"] else ""
        row = [r["question"], " | ".join(r["answers"]), r["prediction"], r["correct"], title]
        for k in range(num_blocks):
            present = k < len(titles)
            row += [titles[k] if present else None, r["scores"][k] if present else None,
                    r["has_answer"][k] if present else None]  # fmt: skip
        data.append(row)
    return columns, data
