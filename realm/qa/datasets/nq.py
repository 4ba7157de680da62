"""NQ-open: jsonl ``{"question", "answer": [..]}``; HF ``nq_open``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from realm.qa.datasets.common import LoadStats, QAExample
from realm.qa.datasets.generic import load_qa_jsonl
from realm.qa.datasets.hf import _load_hf

__all__ = ["load_hf_nq_open", "load_nq_open"]


def load_nq_open(path: str | Path, *, skip_malformed: bool = False, stats: LoadStats | None = None) -> list[QAExample]:
    """NQ-open jsonl ``{"question", "answer": [..]}`` (``NQ-open.dev.jsonl``: 3,610 questions, "NQ test")."""
    return load_qa_jsonl(path, "question", "answer", skip_malformed=skip_malformed, stats=stats)


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
