"""Reading JSON-lines files: the one place that turns a bad line into an error naming ``file:line``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable, Iterator

from realm.core.errors import DataFileError


def iter_jsonl(path: str | Path, on_error: Callable[[str, str], None] | None = None) -> Iterator[tuple[str, dict]]:
    """Yields ``("file:line", record)`` for every non-empty line holding a JSON object.

    A malformed line raises ``DataFileError("file:line: reason")``, or, when ``on_error`` is given, is reported to
    ``on_error(where, reason)`` and skipped (the caller counts it). A missing file raises ``FileNotFoundError``.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"file not found: {path}")
    # note: bytes in, decoded line by line, so a byte that is not UTF-8 is reported with its line, not as a
    # UnicodeDecodeError at a byte offset of the whole file
    with path.open("rb") as lines:
        for line_number, raw in enumerate(lines, start=1):
            where = f"{path}:{line_number}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                line, reason = "", f"not UTF-8 (byte {err.start + 1} of the line is {raw[err.start]:#04x})"
            else:
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                    reason = None if isinstance(record, dict) else f"expected a JSON object, got {type(record).__name__}"
                except json.JSONDecodeError as err:
                    reason = f"invalid JSON ({err})"
            if reason is None:
                yield where, record
            elif on_error is None:
                raise DataFileError(f"{where}: {reason}")
            else:
                on_error(where, reason)


def iter_field(paths: str | Path | list, field: str) -> Iterator[str]:
    """The string ``field`` of every record of one or several jsonl files, in order.

    Raises ``DataFileError`` naming ``file:line`` for a malformed line, a missing field or a non-string value.
    """
    for path in [paths] if isinstance(paths, (str, Path)) else paths:
        for where, record in iter_jsonl(path):
            if field not in record:
                raise DataFileError(f"{where}: missing field {field!r} (it has {sorted(record)})")
            if not isinstance(record[field], str):
                raise DataFileError(f"{where}: field {field!r} is {type(record[field]).__name__}, not a string")
            yield record[field]


def iter_json_object(path: str | Path) -> Iterator[tuple[str, str, Any]]:
    """``(file:line, key, value)`` of each entry of a file holding one JSON object, decoded entry by entry so that
    errors can name the line where an entry starts (a syntax error raises ``DataFileError``: nothing after it can be
    read, so there is nothing to skip to). A missing file raises ``FileNotFoundError``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"file not found: {path}")
    text = path.read_text(encoding="utf-8")
    decoder, ws = json.JSONDecoder(), re.compile(r"\s*")
    counted = [0, 1]  # note: (position, its line), advanced as the scan moves forward: counting from 0 each time
    # would be quadratic in the file's size

    def where(pos: int) -> str:
        counted[1] += text.count("\n", counted[0], pos)
        counted[0] = pos
        return f"{path}:{counted[1]}"

    pos = ws.match(text, 0).end()
    if not text.startswith("{", pos):
        raise DataFileError(f"{where(pos)}: expected a JSON object mapping ids to records")
    pos = ws.match(text, pos + 1).end()
    while not text.startswith("}", pos):
        at = where(pos)
        try:
            key, pos = decoder.raw_decode(text, pos)
            pos = ws.match(text, pos).end()
            if not text.startswith(":", pos) or not isinstance(key, str):
                raise ValueError("expected a string key and ':'")
            value, pos = decoder.raw_decode(text, ws.match(text, pos + 1).end())
        except ValueError as err:
            raise DataFileError(f"{at}: not valid JSON ({err})") from None
        yield at, key, value
        pos = ws.match(text, pos).end()
        if text.startswith(",", pos):
            pos = ws.match(text, pos + 1).end()
        elif not text.startswith("}", pos):
            raise DataFileError(f"{where(pos)}: expected ',' or '}}' after an entry")
