"""Open-domain QA data sets (NQ-open, WebQuestions, CuratedTrec, SQuAD v1.1) read into one record type.

Every loader returns ``list[QAExample]`` and fills an optional ``LoadStats`` in place. Nothing is dropped silently: a
malformed record raises ``DataFileError("file:line: reason")`` (SQuAD, a single JSON object, names the record's JSON
path instead of a line), or, with ``skip_malformed=True``, is skipped, counted in ``LoadStats.num_skipped`` and the
count is logged as a warning. No answer field is ever passed to ``eval``: lists are parsed with ``json`` (and
``ast.literal_eval`` for Python-repr lists in tsv files), WebQuestions' ``targetValue`` with a small tokenizer.

Formats (the real files are described in ``shared/data/real/*/SOURCE.md``):

- NQ-open: jsonl ``{"question", "answer": [..]}``; HF ``nq_open``.
- WebQuestions: Stanford json list ``{"url", "targetValue": "(list (description X) ...)", "utterance"}``, DrQA txt
  (jsonl ``{"answer": [..], "question"}``), brmson json list ``{"qId", "answers": [..], "qText"}``; HF
  ``web_questions``.
- CuratedTrec: DrQA txt (jsonl whose answers are regular expressions), brmson tsv ``id  type  question  regex``
  (no header). Regex answers are checked with ``re.compile`` and marked ``answers_are_regex=True``.
- SQuAD v1.1 json: questions plus the paragraphs as a small corpus ``{"id": "{title}#{i}", "title", "text"}``.
"""

from __future__ import annotations

import ast
import json
import logging
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator, Literal

from realm.jsonl import DataFileError, iter_jsonl

logger = logging.getLogger(__name__)

Task = Literal["nq", "wq", "ct", "squad", "jsonl"]

__all__ = [
    "DataFileError",
    "LoadStats",
    "QAExample",
    "load_curatedtrec_drqa",
    "load_curatedtrec_tsv",
    "load_hf_nq_open",
    "load_hf_web_questions",
    "load_nq_open",
    "load_qa_jsonl",
    "load_qa_tsv",
    "load_squad",
    "load_task",
    "load_webquestions_brmson",
    "load_webquestions_drqa",
    "load_webquestions_stanford",
    "parse_target_value",
]


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
    num_skipped: int = 0

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


# ---------------------------------------------------------------------------------------------------------------------
# shared helpers


def _reject(where: str, reason: str, skip_malformed: bool, stats: LoadStats) -> None:
    if not skip_malformed:
        raise DataFileError(f"{where}: {reason}")
    stats.num_skipped += 1
    logger.debug("skipping %s: %s", where, reason)


def _report(source: str | Path, stats: LoadStats) -> None:
    log = logger.warning if stats.num_skipped else logger.info
    log("%s: read %d questions, skipped %d malformed", source, stats.num_records, stats.num_skipped)


def _existing_file(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"QA data file not found: {path}")
    return path


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


# ---------------------------------------------------------------------------------------------------------------------
# generic readers


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
    path = _existing_file(path)
    stats = stats if stats is not None else LoadStats()
    examples: list[QAExample] = []
    for where, record in iter_jsonl(path, on_error=lambda w, r: _reject(w, r, skip_malformed, stats)):
        needed = [question_field, answers_field] + ([id_field] if id_field else [])
        missing = [field for field in needed if field not in record]
        if missing:
            _reject(where, f"missing field(s) {missing} (it has {sorted(record)})", skip_malformed, stats)
            continue
        reason = _check_question(record[question_field])
        answers, answer_reason = _check_answers(record[answers_field], allow_string=True)
        reason = reason or answer_reason or (_check_regexes(answers) if regex else None)
        if id_field and reason is None and not isinstance(record[id_field], (str, int)):
            reason = f"id field {id_field!r} is {type(record[id_field]).__name__}, not a string or integer"
        if reason is not None:
            _reject(where, reason, skip_malformed, stats)
            continue
        example_id = str(record[id_field]) if id_field else f"{path.name}:{_line_of(where)}"
        examples.append(QAExample(record[question_field], answers, regex, example_id))
        stats.num_records += 1
    _report(path, stats)
    return examples


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
    path = _existing_file(path)
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
                _reject(where, f"expected at least {needed} columns, got {len(cells)}", skip_malformed, stats)
                continue
            question = cells[index[question_col]]
            reason = _check_question(question)
            answers, answer_reason = _parse_answers_cell(cells[index[answers_col]], answers_format)
            reason = reason or answer_reason or (_check_regexes(answers) if regex else None)
            if reason is not None:
                _reject(where, reason, skip_malformed, stats)
                continue
            example_id = cells[index[id_col]] if id_col is not None else f"{path.name}:{line_number}"
            examples.append(QAExample(question, answers, regex, example_id))
            stats.num_records += 1
    _report(path, stats)
    return examples


# ---------------------------------------------------------------------------------------------------------------------
# NQ-open


def load_nq_open(path: str | Path, *, skip_malformed: bool = False, stats: LoadStats | None = None) -> list[QAExample]:
    """NQ-open jsonl ``{"question", "answer": [..]}`` (``NQ-open.dev.jsonl``: 3,610 questions, "NQ test")."""
    return load_qa_jsonl(path, "question", "answer", skip_malformed=skip_malformed, stats=stats)


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
            _reject(where, reason, skip_malformed, stats)
            continue
        examples.append(QAExample(row[question_col], answers, False, f"{name}-{split}-{row_number}"))
        stats.num_records += 1
    _report(f"{name}[{split}]", stats)
    return examples


def load_hf_nq_open(
    split: str = "validation",
    *,
    name: str = "nq_open",
    skip_malformed: bool = False,
    stats: LoadStats | None = None,
    **load_kw: Any,
) -> list[QAExample]:
    """NQ-open from the hub (``datasets.load_dataset("nq_open", split=...)``; columns question, answer)."""
    return _load_hf(name, split, "question", "answer", skip_malformed, stats, load_kw)


# ---------------------------------------------------------------------------------------------------------------------
# WebQuestions

_DESCRIPTION = "(description"
_QUOTED_END = re.compile(r"\s*\)\s*(?=\(|$)")


def parse_target_value(text: str) -> list[str]:
    """The answers of a WebQuestions ``targetValue``: ``(list (description X) (description "Y Z") ...)``.

    Items are bare (``Lawyer``: everything up to the next ``)``) or double-quoted with ``\\"`` / ``\\\\`` escapes.
    The release also has unescaped inner quotes (``"Temperance "Tempie" Fitzgerald"``, ``""Ye will say ...""``), so a
    quote closes an item only where it is followed by ``)`` and then the next item or the end of the list; inner
    quotes are kept verbatim (DrQA's converter drops them). Raises ``ValueError`` for anything else.
    """
    s = text.strip()
    if not (s.startswith("(list") and s.endswith(")")) or (len(s) > 6 and not s[5].isspace()):
        raise ValueError(f"targetValue is not a (list ...): {text[:80]!r}")
    body = s[len("(list") : -1]
    answers: list[str] = []
    pos = 0
    while True:
        while pos < len(body) and body[pos].isspace():
            pos += 1
        if pos == len(body):
            break
        if not body.startswith(_DESCRIPTION, pos):
            raise ValueError(f"expected '(description' at character {pos + 5} of targetValue {text[:80]!r}")
        pos += len(_DESCRIPTION)
        if pos >= len(body) or not body[pos].isspace():
            raise ValueError(f"expected a space after '(description' in targetValue {text[:80]!r}")
        while pos < len(body) and body[pos].isspace():
            pos += 1
        if pos < len(body) and body[pos] == '"':
            chars: list[str] = []
            i = pos + 1
            while True:
                if i >= len(body):
                    raise ValueError(f"unterminated quoted item in targetValue {text[:80]!r}")
                c = body[i]
                if c == "\\" and i + 1 < len(body):
                    nxt = body[i + 1]
                    chars.append(nxt if nxt in '"\\' else c + nxt)
                    i += 2
                    continue
                if c == '"':
                    closing = _QUOTED_END.match(body, i + 1)
                    if closing:
                        pos = closing.end()
                        break
                chars.append(c)
                i += 1
            answer = "".join(chars)
        else:
            end = body.find(")", pos)
            if end < 0:
                raise ValueError(f"unclosed '(description' in targetValue {text[:80]!r}")
            answer = body[pos:end].strip()
            pos = end + 1
        if not answer:
            raise ValueError(f"empty description in targetValue {text[:80]!r}")
        answers.append(answer)
    if not answers:
        raise ValueError(f"targetValue has no answers: {text[:80]!r}")
    return answers


def _load_json_array(
    path: str | Path,
    question_field: str,
    answers_field: str,
    id_field: str | None,
    parse_answers: Any,
    skip_malformed: bool,
    stats: LoadStats | None,
) -> list[QAExample]:
    path = _existing_file(path)
    stats = stats if stats is not None else LoadStats()
    examples: list[QAExample] = []
    for where, item in _iter_json_array(path):
        if not isinstance(item, dict):
            _reject(where, f"expected a JSON object, got {type(item).__name__}", skip_malformed, stats)
            continue
        needed = [question_field, answers_field] + ([id_field] if id_field else [])
        missing = [field for field in needed if field not in item]
        if missing:
            _reject(where, f"missing field(s) {missing} (it has {sorted(item)})", skip_malformed, stats)
            continue
        reason = _check_question(item[question_field])
        answers, answer_reason = parse_answers(item[answers_field])
        reason = reason or answer_reason
        if reason is not None:
            _reject(where, reason, skip_malformed, stats)
            continue
        example_id = str(item[id_field]) if id_field else f"{path.name}:{_line_of(where)}"
        examples.append(QAExample(item[question_field], answers, False, example_id))
        stats.num_records += 1
    _report(path, stats)
    return examples


def _target_value_answers(value: Any) -> tuple[list[str] | None, str | None]:
    if not isinstance(value, str):
        return None, f"targetValue is {type(value).__name__}, not a string"
    try:
        return parse_target_value(value), None
    except ValueError as err:
        return None, str(err)


def load_webquestions_stanford(
    path: str | Path, *, skip_malformed: bool = False, stats: LoadStats | None = None
) -> list[QAExample]:
    """The original SEMPRE release: a JSON array of ``{"url", "targetValue", "utterance"}`` (test: 2,032)."""
    return _load_json_array(path, "utterance", "targetValue", None, _target_value_answers, skip_malformed, stats)


def load_webquestions_drqa(
    path: str | Path, *, skip_malformed: bool = False, stats: LoadStats | None = None
) -> list[QAExample]:
    """DrQA's ``WebQuestions-*.txt``: one ``{"answer": [..], "question"}`` per line (test: 2,032)."""
    return load_qa_jsonl(path, "question", "answer", skip_malformed=skip_malformed, stats=stats)


def load_webquestions_brmson(
    path: str | Path, *, skip_malformed: bool = False, stats: LoadStats | None = None
) -> list[QAExample]:
    """brmson's factoid-webquestions ``main/*.json``: a JSON array of ``{"qId", "answers": [..], "qText"}``.

    Answers are kept as brmson wrote them (in 5 test questions brmson kept the release's stray inner quotes).
    """
    return _load_json_array(
        path,
        "qText",
        "answers",
        "qId",
        lambda value: _check_answers(value, allow_string=False),
        skip_malformed,
        stats,
    )


def load_hf_web_questions(
    split: str = "test",
    *,
    name: str = "web_questions",
    skip_malformed: bool = False,
    stats: LoadStats | None = None,
    **load_kw: Any,
) -> list[QAExample]:
    """WebQuestions from the hub (``datasets.load_dataset("web_questions", split=...)``; columns question, answers)."""
    return _load_hf(name, split, "question", "answers", skip_malformed, stats, load_kw)


# ---------------------------------------------------------------------------------------------------------------------
# CuratedTrec


def load_curatedtrec_drqa(
    path: str | Path, *, skip_malformed: bool = False, stats: LoadStats | None = None
) -> list[QAExample]:
    """DrQA's ``CuratedTrec-*.txt``: ``{"question", "answer": [regex]}`` per line (test: 694); regexes are checked."""
    return load_qa_jsonl(path, "question", "answer", regex=True, skip_malformed=skip_malformed, stats=stats)


def load_curatedtrec_tsv(
    path: str | Path, *, skip_malformed: bool = False, stats: LoadStats | None = None
) -> list[QAExample]:
    """brmson's dataset-factoid-curated tsv, no header: ``id  type  question  answer-regex``.

    ``large2180-test.tsv`` is the 694-question test set DrQA/DPR use; ``curated-test.tsv`` is brmson's different
    hand-curated v2 test split (430 questions). The id column becomes ``QAExample.id``.
    """
    return load_qa_tsv(
        path, 2, 3, regex=True, id_col=0, answers_format="string", skip_malformed=skip_malformed, stats=stats
    )


# ---------------------------------------------------------------------------------------------------------------------
# SQuAD v1.1


def load_squad(
    path: str | Path, *, skip_malformed: bool = False, stats: LoadStats | None = None
) -> tuple[list[QAExample], list[dict]]:
    """SQuAD v1.1 json: the questions, and the paragraphs as a corpus ``{"id", "title", "text"}``.

    Paragraph ids are ``{title}#{i}`` (the raw article title, i counting that title's paragraphs from 0); the corpus
    title has underscores turned into spaces. Each question keeps SQuAD's id in ``id`` and its paragraph's id in
    ``paragraph_id``. The file is one JSON object, so errors name the record's JSON path rather than a line.
    """
    path = _existing_file(path)
    stats = stats if stats is not None else LoadStats()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise DataFileError(f"{path}:{err.lineno}: invalid JSON ({err.msg}, column {err.colno})") from err
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise DataFileError(f"{path}:1: expected a SQuAD object with a 'data' list of articles")
    examples: list[QAExample] = []
    paragraphs: list[dict] = []
    next_index: dict[str, int] = {}
    for a, article in enumerate(data["data"]):
        where_article = f"{path}: data[{a}]"
        if not isinstance(article, dict) or not isinstance(article.get("title"), str):
            raise DataFileError(f"{where_article}: expected an article with a string 'title'")
        if not isinstance(article.get("paragraphs"), list):
            raise DataFileError(f"{where_article}: expected a 'paragraphs' list")
        title = article["title"]
        for p, paragraph in enumerate(article["paragraphs"]):
            where_paragraph = f"{where_article}.paragraphs[{p}]"
            if (
                not isinstance(paragraph, dict)
                or not isinstance(paragraph.get("context"), str)
                or not isinstance(paragraph.get("qas"), list)
            ):
                _reject(where_paragraph, "expected a string 'context' and a 'qas' list", skip_malformed, stats)
                continue
            index = next_index.get(title, 0)
            next_index[title] = index + 1
            paragraph_id = f"{title}#{index}"
            paragraphs.append({"id": paragraph_id, "title": title.replace("_", " "), "text": paragraph["context"]})
            for q, qa in enumerate(paragraph["qas"]):
                where = f"{where_paragraph}.qas[{q}]"
                if not isinstance(qa, dict) or not all(key in qa for key in ("question", "answers", "id")):
                    _reject(where, "expected an object with question, answers and id", skip_malformed, stats)
                    continue
                reason = _check_question(qa["question"])
                answers = qa["answers"]
                if reason is None and not (
                    isinstance(answers, list)
                    and answers
                    and all(isinstance(ans, dict) and isinstance(ans.get("text"), str) for ans in answers)
                ):
                    reason = "answers must be a non-empty list of {'text': str, 'answer_start': int}"
                if reason is not None:
                    _reject(where, reason, skip_malformed, stats)
                    continue
                texts = [ans["text"] for ans in answers]
                examples.append(QAExample(qa["question"], texts, False, str(qa["id"]), paragraph_id))
                stats.num_records += 1
    _report(path, stats)
    return examples, paragraphs


# ---------------------------------------------------------------------------------------------------------------------
# dispatcher


def _hf_split(path: str) -> str | None:
    return path[3:] if path.startswith("hf:") else None


def _json_array_keys(path: Path) -> set[str]:
    """The keys of the first object of a JSON-array file (read from its first few kilobytes)."""
    with path.open(encoding="utf-8") as handle:
        head = handle.read(8192)
    start = head.find("{")
    if start < 0:
        return set()
    try:
        first, _ = json.JSONDecoder().raw_decode(head, start)
    except json.JSONDecodeError:
        return set()
    return set(first) if isinstance(first, dict) else set()


def load_task(task: Task, path: str, **kw: Any) -> list[QAExample]:
    """Questions for ``task`` from ``path``, choosing the format by file name / extension / content.

    - ``nq``: jsonl (``load_nq_open``); ``hf:<split>`` reads the hub (``load_hf_nq_open``).
    - ``wq``: ``.txt``/``.jsonl`` DrQA; ``.json`` Stanford (items with ``targetValue``) or brmson (``qText``);
      ``hf:<split>`` the hub.
    - ``ct``: ``.txt``/``.jsonl`` DrQA; ``.tsv`` brmson.
    - ``squad``: SQuAD v1.1 json (questions only; use ``load_squad`` for the paragraphs too).
    - ``jsonl``: ``load_qa_jsonl`` (``kw`` picks the fields).
    Extra keyword arguments (``skip_malformed``, ``stats``, ...) go to the loader.
    """
    split = _hf_split(path)
    suffix = Path(path).suffix.lower()
    if task == "nq":
        return load_hf_nq_open(split, **kw) if split is not None else load_nq_open(path, **kw)
    if task == "wq":
        if split is not None:
            return load_hf_web_questions(split, **kw)
        if suffix in (".txt", ".jsonl"):
            return load_webquestions_drqa(path, **kw)
        if suffix == ".json":
            keys = _json_array_keys(_existing_file(path))
            if "targetValue" in keys:
                return load_webquestions_stanford(path, **kw)
            if "qText" in keys:
                return load_webquestions_brmson(path, **kw)
            raise DataFileError(f"{path}:1: not a WebQuestions json (first item has keys {sorted(keys)})")
        raise ValueError(f"wq: cannot tell the format of {path!r} (expected .json, .txt, .jsonl or hf:<split>)")
    if task == "ct":
        if suffix in (".txt", ".jsonl"):
            return load_curatedtrec_drqa(path, **kw)
        if suffix == ".tsv":
            return load_curatedtrec_tsv(path, **kw)
        raise ValueError(f"ct: cannot tell the format of {path!r} (expected .txt, .jsonl or .tsv)")
    if task == "squad":
        return load_squad(path, **kw)[0]
    if task == "jsonl":
        return load_qa_jsonl(path, **kw)
    raise ValueError(f"task must be nq, wq, ct, squad or jsonl, got {task!r}")
