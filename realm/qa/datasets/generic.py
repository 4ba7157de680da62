"""Generic readers: any jsonl or delimited-text file of questions, with the field or column names given by the caller.

No answer field is ever passed to ``eval``: lists are parsed with ``json``, and ``ast.literal_eval`` for the
Python-repr lists of tsv files.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Literal

from realm.core.errors import DataFileError
from realm.data.jsonl import iter_jsonl
from realm.data.malformed import existing_file, reject, report
from realm.qa.datasets.common import (
    LoadStats,
    QAExample,
    _check_answers,
    _check_question,
    _check_regexes,
    _examples_from_records,
)

__all__ = ["load_qa_jsonl", "load_qa_tsv"]


def load_qa_jsonl(
    path: str | Path,
    question_field: str = "question",
    answers_field: str = "answers",
    regex: bool = False,
    *,
    id_field: str | None = None,
    skip_malformed: bool = False,
    stats: LoadStats | None = None,
) -> list[QAExample]:
    """Questions from a JSON-lines file; ``answers_field`` holds a list of strings or a single string.

    Args:
        path: The jsonl file.
        question_field: Field with the question.
        answers_field: Field with the answers (a JSON list of strings, or one string).
        regex: The answers are regular expressions (each is checked with ``re.compile``).
        id_field: Field with the record id (a string or number); default ``{file name}:{line}``.
        skip_malformed: Skip and count malformed lines instead of raising ``DataFileError``.
        stats: Updated in place with the counts.
    """
    path = existing_file(path, "QA data")
    stats = stats if stats is not None else LoadStats()
    return _examples_from_records(
        path,
        iter_jsonl(path, on_error=lambda w, r: reject(w, r, skip_malformed, stats)),
        question_field=question_field,
        answers_field=answers_field,
        id_field=id_field,
        parse_answers=lambda value: _check_answers(value, allow_string=True),
        regex=regex,
        skip_malformed=skip_malformed,
        stats=stats,
    )


def _parse_answers_cell(cell: str, answers_format: str) -> tuple[list[str] | None, str | None]:
    """A tsv answers cell: a JSON / Python-repr list of strings, or one string (``answers_format`` auto|list|string)."""
    if answers_format == "string":
        return _check_answers(cell, allow_string=True)
    stripped = cell.strip()
    if stripped.startswith("[") and stripped.endswith("]"):
        for parse in (json.loads, ast.literal_eval):
            try:
                value = parse(stripped)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                continue
            if isinstance(value, list):
                return _check_answers(value, allow_string=False)
    if answers_format == "list":
        return None, f"answers cell is not a list of strings: {cell[:80]!r}"
    return _check_answers(cell, allow_string=True)


def load_qa_tsv(
    path: str | Path,
    question_col: int | str,
    answers_col: int | str,
    sep: str = "\t",
    *,
    regex: bool = False,
    id_col: int | str | None = None,
    answers_format: Literal["auto", "list", "string"] = "auto",
    skip_malformed: bool = False,
    stats: LoadStats | None = None,
) -> list[QAExample]:
    """Questions from a delimited text file, one row a line (no quoting: a field cannot hold ``sep`` or a newline).

    Columns given as integers (0-based) mean the file has no header; as names, the first line is the header.
    The answers cell is a JSON list, a Python-repr list (DPR's ``qas/*.csv``; parsed with ``ast.literal_eval``,
    never ``eval``) or a single string; ``answers_format`` forces ``list`` or ``string`` (regexes may look like lists).
    """
    path = existing_file(path, "QA data")
    stats = stats if stats is not None else LoadStats()
    columns = [question_col, answers_col] + ([id_col] if id_col is not None else [])
    by_name = any(isinstance(col, str) for col in columns)
    if by_name and not all(isinstance(col, str) for col in columns):
        raise ValueError("give all columns as names (file with a header) or all as indices (no header)")
    examples: list[QAExample] = []
    index: dict[int | str, int] = {}
    with path.open(encoding="utf-8", newline="") as lines:
        for line_number, line in enumerate(lines, start=1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            where = f"{path}:{line_number}"
            cells = line.split(sep)
            if by_name and not index:
                missing = [col for col in columns if col not in cells]
                if missing:
                    raise DataFileError(f"{where}: header {cells} lacks column(s) {missing}")
                index = {col: cells.index(col) for col in columns}
                continue
            if not by_name:
                index = {col: col for col in columns}
            needed = max(index.values()) + 1
            if len(cells) < needed:
                reject(where, f"expected at least {needed} columns, got {len(cells)}", skip_malformed, stats)
                continue
            question = cells[index[question_col]]
            reason = _check_question(question)
            answers, answer_reason = _parse_answers_cell(cells[index[answers_col]], answers_format)
            reason = reason or answer_reason or (_check_regexes(answers) if regex else None)
            if reason is not None:
                reject(where, reason, skip_malformed, stats)
                continue
            example_id = cells[index[id_col]] if id_col is not None else f"{path.name}:{line_number}"
            examples.append(QAExample(question, answers, regex, example_id))
            stats.num_records += 1
    report(path, stats, "questions")
    return examples
