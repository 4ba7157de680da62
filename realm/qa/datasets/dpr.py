"""DPR's ``qas`` format (the NQ / TriviaQA splits of DPR, RAG and FiD): ``question<TAB>answers``, no header.

The answers cell is a Python list literal (``['Linda Davis']``), parsed with ``ast.literal_eval``, never ``eval``.
TriviaQA's files quote a cell csv-style when it holds quotes (``"[..., ""Gentleman's sport"", ...]"``), so rows are
read with ``csv.reader``; errors name the physical line a row starts on.
"""

from __future__ import annotations

from pathlib import Path

from realm.data.malformed import existing_file, reject, report
from realm.data.tsv import iter_tsv
from realm.qa.datasets.common import LoadStats, QAExample, _check_question
from realm.qa.datasets.generic import _parse_answers_cell

__all__ = ["load_dpr_qas"]


def load_dpr_qas(path: str | Path, *, skip_malformed: bool = False, stats: LoadStats | None = None) -> list[QAExample]:
    """Questions of a DPR qas file (``topics.dpr.nq.dev.txt``, ``nq-test.qa.csv``, ``trivia-test.qa.csv``, ...); the
    id of each is ``{file name}:{line}``."""
    path = existing_file(path, "QA data")
    stats = stats if stats is not None else LoadStats()
    examples: list[QAExample] = []
    for where, row in iter_tsv(path, lambda where, reason: reject(where, reason, skip_malformed, stats)):
        if not "".join(row).strip():
            continue
        if len(row) != 2:
            reject(where, f"expected 2 tab-separated columns (question, answers), got {len(row)}", skip_malformed,
                    stats)  # fmt: skip
            continue
        answers, reason = _parse_answers_cell(row[1], "list")
        reason = _check_question(row[0]) or reason
        if reason is not None:
            reject(where, reason, skip_malformed, stats)
            continue
        examples.append(QAExample(row[0].strip(), answers, False, f"{path.name}:{where.rsplit(':', 1)[1]}"))
        stats.num_records += 1
    report(path, stats, "questions")
    return examples
