"""The plain-text table ``realm demo`` and ``realm real-text`` print at the end: one named figure a line."""

from __future__ import annotations

from typing import Sequence


def format_rows(title: str, rows: Sequence[tuple[str, object]]) -> str:
    """``title``, a rule, then ``name  value`` lines aligned on the longest name (floats to 3 decimals)."""
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {value:.3f}" if isinstance(value, float) else f"{name:<{width}}  {value}"
             for name, value in rows]  # fmt: skip
    return "\n".join([title, "-" * (width + 10), *lines])
