"""What every QA loader shares: the record type, the load counts and the checks that reject a malformed record.

A malformed record raises ``DataFileError("file:line: reason")``, or, with ``skip_malformed=True``, is skipped,
counted in ``LoadStats.num_malformed`` and the count is logged as a warning. Keeping these checks in one module is what
makes every format report errors the same way.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from realm.core.errors import DataFileError
from realm.data.malformed import existing_file, reject, report

# The package's name, not this module's: the loaders logged as "realm.qa.datasets" before the package was split, and log
# filters (and tests) select on that name.

__all__ = ["DataFileError", "LoadStats", "QAExample"]


@dataclass(frozen=True, slots=True)
class QAExample:
    """One question with its reference answers (literal strings, or regular expressions for CuratedTrec)."""

    question: str
    answers: list[str]
    answers_are_regex: bool
    id: str
    """Stable id: the source's own id where it has one (brmson qId, CuratedTrec id, SQuAD id), else ``file:line``."""
    paragraph_id: str = ""
    """SQuAD only: the id (``{title}#{i}``) of the paragraph the question was written from."""


@dataclass(slots=True)
class LoadStats:
    """What a loader read: records passed on and malformed records skipped (only with ``skip_malformed``)."""

    num_records: int = 0
    num_malformed: int = 0

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def _check_question(value: Any) -> str | None:
    """The reason a question value is unusable, or None."""
    if not isinstance(value, str):
        return f"question is {type(value).__name__}, not a string"
    if not value.strip():
        return "question is empty"
    return None


def _check_answers(value: Any, *, allow_string: bool) -> tuple[list[str] | None, str | None]:
    """``(answers, None)`` for a non-empty list of strings (or a single string when allowed), else ``(None, reason)``."""
    if allow_string and isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return None, f"answers are {type(value).__name__}, not a list of strings"
    if not value:
        return None, "answer list is empty"
    if not all(isinstance(answer, str) for answer in value):
        return None, "answers must all be strings"
    return list(value), None


def _check_regexes(answers: list[str]) -> str | None:
    for pattern in answers:
        try:
            re.compile(pattern)
        except re.error as err:
            return f"invalid regular expression {pattern!r} ({err})"
    return None


def _iter_json_array(path: Path) -> Iterator[tuple[str, Any]]:
    """Yields ``("file:line", item)`` for every item of a file holding one JSON array.

    The line is where the item starts. A file that is not valid JSON raises ``DataFileError`` naming the line of the
    syntax error (it cannot be skipped: nothing after it can be trusted).
    """
    text = path.read_text(encoding="utf-8")
    try:
        whole = json.loads(text)
    except json.JSONDecodeError as err:
        raise DataFileError(f"{path}:{err.lineno}: invalid JSON ({err.msg}, column {err.colno})") from err
    if not isinstance(whole, list):
        raise DataFileError(f"{path}:1: expected a JSON array, got {type(whole).__name__}")
    decoder = json.JSONDecoder()
    whitespace = re.compile(r"[ \t\n\r]*")
    pos = whitespace.match(text, 0).end() + 1  # past "["
    line, counted_to = 1, 0
    for _ in range(len(whole)):
        pos = whitespace.match(text, pos).end()
        item, end = decoder.raw_decode(text, pos)
        line += text.count("\n", counted_to, pos)
        counted_to = pos
        yield f"{path}:{line}", item
        pos = whitespace.match(text, end).end() + 1  # past "," or "]"


def _line_of(where: str) -> str:
    return where.rsplit(":", 1)[1]


def _examples_from_records(
    path: Path,
    records: Iterable[tuple[str, Any]],
    *,
    question_field: str,
    answers_field: str,
    id_field: str | None,
    parse_answers: Callable[[Any], tuple[list[str] | None, str | None]],
    regex: bool,
    skip_malformed: bool,
    stats: LoadStats,
) -> list[QAExample]:
    """The one validation of question records (``(where, record)`` pairs from a jsonl file or a JSON array)."""
    examples: list[QAExample] = []
    for where, item in records:
        if not isinstance(item, dict):
            reject(where, f"expected a JSON object, got {type(item).__name__}", skip_malformed, stats)
            continue
        needed = [question_field, answers_field] + ([id_field] if id_field else [])
        missing = [field for field in needed if field not in item]
        if missing:
            reject(where, f"missing field(s) {missing} (it has {sorted(item)})", skip_malformed, stats)
            continue
        reason = _check_question(item[question_field])
        answers, answer_reason = parse_answers(item[answers_field])
        reason = reason or answer_reason or (_check_regexes(answers) if regex else None)
        if id_field and reason is None and not isinstance(item[id_field], (str, int)):
            reason = f"id field {id_field!r} is {type(item[id_field]).__name__}, not a string or integer"
        if reason is not None:
            reject(where, reason, skip_malformed, stats)
            continue
        example_id = str(item[id_field]) if id_field else f"{path.name}:{_line_of(where)}"
        examples.append(QAExample(item[question_field], answers, regex, example_id))
        stats.num_records += 1
    report(path, stats, "questions")
    return examples


def _load_json_array(
    path: str | Path,
    question_field: str,
    answers_field: str,
    id_field: str | None,
    parse_answers: Any,
    skip_malformed: bool,
    stats: LoadStats | None,
) -> list[QAExample]:
    path = existing_file(path, "QA data")
    return _examples_from_records(
        path,
        _iter_json_array(path),
        question_field=question_field,
        answers_field=answers_field,
        id_field=id_field,
        parse_answers=parse_answers,
        regex=False,
        skip_malformed=skip_malformed,
        stats=stats if stats is not None else LoadStats(),
    )
