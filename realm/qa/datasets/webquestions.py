"""WebQuestions in the formats it circulates in, all read into the same answers.

- Stanford (SEMPRE) json list ``{"url", "targetValue": "(list (description X) ...)", "utterance"}``; the
  ``targetValue`` is read with a small tokenizer (``parse_target_value``), never ``eval``.
- DrQA txt: jsonl ``{"answer": [..], "question"}``.
- brmson json list ``{"qId", "answers": [..], "qText"}``.
- HF ``web_questions``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from realm.qa.datasets.common import LoadStats, QAExample, _check_answers, _load_json_array
from realm.qa.datasets.generic import load_qa_jsonl
from realm.qa.datasets.hf import _load_hf

__all__ = [
    "load_hf_web_questions",
    "load_webquestions_brmson",
    "load_webquestions_drqa",
    "load_webquestions_stanford",
    "parse_target_value",
]

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
