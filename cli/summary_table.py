"""The plain-text table ``realm demo`` and ``realm real-text`` print at the end (one named figure a line), and the
lines after it: where the outputs are and what to run next."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from realm.pipeline.layout import qa_run
from realm.run.layout import METRICS_FILE, SUMMARY_FILE


def format_rows(title: str, rows: Sequence[tuple[str, object]]) -> str:
    """``title``, a rule, then ``name  value`` lines aligned on the longest name (floats to 3 decimals)."""
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {value:.3f}" if isinstance(value, float) else f"{name:<{width}}  {value}"
             for name, value in rows]  # fmt: skip
    return "\n".join([title, "-" * (width + 10), *lines])


def closing_lines(run: str | Path) -> str:
    """Where a pipeline's outputs are and the commands to run next, for the lines after its table (only the outputs
    the run wrote: a run stopped early has no model)."""
    run = Path(run)
    where = [
        ("model", run / "model", "encoder/ (transformers), retriever/ (sentence-transformers)"),
        ("QA model", qa_run(run) / "model", "the fine-tuned reader and retriever (realm evaluate)"),
        ("summary", run / SUMMARY_FILE, "the figures above, with their definitions"),
        ("metrics", run / METRICS_FILE, "every logged step (realm report draws them)"),
    ]
    rows = [(f"{name:<9}{path}", what) for name, path, what in where if path.exists()]
    commands = [
        (f"realm report {run}", f"an HTML report of every stage -> {run / 'report.html'}"),
        (f'realm inspect {run} "QUERY"', "the blocks the retriever finds for a query"),
        (f"realm export {run} OUT --format hf|sentence-transformers|pyserini", "the model for other libraries"),
    ]
    sections = [("outputs", rows), ("next", commands)] if rows else [("next", commands)]
    return "\n\n".join(_two_columns(title, pairs) for title, pairs in sections)


def _two_columns(title: str, pairs: Sequence[tuple[str, str]]) -> str:
    width = max(len(left) for left, _ in pairs)
    return "\n".join([title, "-" * (width + 10), *(f"{left:<{width}}  {right}" for left, right in pairs)])
