"""Reading a question-answering data set from the Hugging Face hub, shared by the NQ-open and WebQuestions loaders.

``datasets`` is imported only when a hub loader is called, so reading local files never imports it.
"""

from __future__ import annotations

from realm.core.errors import DataFileError
from realm.data.malformed import reject, report
from realm.qa.datasets.common import LoadStats, QAExample, _check_answers, _check_question


def _load_hf(
    name: str,
    split: str,
    question_col: str,
    answers_col: str,
    skip_malformed: bool,
    stats: LoadStats | None,
    load_kw: dict,
) -> list[QAExample]:
    import datasets

    stats = stats if stats is not None else LoadStats()
    try:
        loaded = datasets.load_dataset(name, split=split, **load_kw)
    except Exception as err:  # noqa: BLE001 - the hub raises many types; say which dataset failed.
        raise DataFileError(f"could not load dataset {name!r} split {split!r}: {err}") from err
    missing = [col for col in (question_col, answers_col) if col not in loaded.column_names]
    if missing:
        raise DataFileError(f"{name}[{split}]: missing column(s) {missing}; it has {loaded.column_names}")
    examples: list[QAExample] = []
    for row_number, row in enumerate(loaded):
        where = f"{name}[{split}] row {row_number}"
        reason = _check_question(row[question_col])
        answers, answer_reason = _check_answers(row[answers_col], allow_string=False)
        reason = reason or answer_reason
        if reason is not None:
            reject(where, reason, skip_malformed, stats)
            continue
        examples.append(QAExample(row[question_col], answers, False, f"{name}-{split}-{row_number}"))
        stats.num_records += 1
    report(f"{name}[{split}]", stats, "questions")
    return examples
