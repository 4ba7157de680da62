"""Reading tab-separated files with csv quoting (DPR's passages and qas files): each row with the line it starts on."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Callable, Iterator


def iter_tsv(path: str | Path, on_error: Callable[[str, str], None]) -> Iterator[tuple[str, list[str]]]:
    """Yields ``("file:line", cells)`` for every row, ``line`` being where the row starts (a quoted cell may hold
    tabs, doubled quotes or newlines, so a row can span lines). A row ``csv`` cannot parse is reported to
    ``on_error(where, reason)`` and skipped (the caller raises or counts)."""
    with Path(path).open(encoding="utf-8", newline="") as handle:
        rows = csv.reader(handle, delimiter="\t", strict=True)
        start = 1
        while True:
            try:
                row = next(rows)
            except StopIteration:
                return
            except csv.Error as err:
                on_error(f"{path}:{start}", f"bad quoting ({err})")
            else:
                yield f"{path}:{start}", row
            start = rows.line_num + 1
