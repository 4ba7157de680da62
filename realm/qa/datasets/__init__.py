"""Open-domain QA data sets (NQ-open, WebQuestions, CuratedTrec, SQuAD v1.1) read into one record type.

Every loader returns ``list[QAExample]`` and fills an optional ``LoadStats`` in place. Nothing is dropped silently: a
malformed record raises ``DataFileError("file:line: reason")`` (SQuAD, a single JSON object, names the record's JSON
path instead of a line), or, with ``skip_malformed=True``, is skipped, counted in ``LoadStats.num_malformed`` and the
count is logged as a warning. No answer field is ever passed to ``eval``: lists are parsed with ``json`` (and
``ast.literal_eval`` for Python-repr lists in tsv files), WebQuestions' ``targetValue`` with a small tokenizer.

One module per format family; each module's docstring describes its formats (the real files are described in
``shared/data/real/*/SOURCE.md``):

- ``common``: ``QAExample``, ``LoadStats`` and the checks every loader shares.
- ``generic``: any jsonl or tsv file, fields or columns named by the caller.
- ``dpr``: DPR's qas format (``question<TAB>['answer', ...]``), its NQ and TriviaQA splits.
- ``nq``: NQ-open jsonl and HF ``nq_open``.
- ``webquestions``: Stanford json, DrQA txt, brmson json and HF ``web_questions``.
- ``curatedtrec``: DrQA txt and brmson tsv (regex answers).
- ``squad``: SQuAD v1.1 json, with its paragraphs as a small corpus.
- ``hf``: the hub reader the NQ-open and WebQuestions loaders share.

This module holds ``load_task``, which picks the loader for a task name and a path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from realm.core.errors import DataFileError
from realm.data.malformed import existing_file
from realm.qa.datasets.common import LoadStats, QAExample
from realm.qa.datasets.curatedtrec import load_curatedtrec_drqa, load_curatedtrec_tsv
from realm.qa.datasets.dpr import load_dpr_qas
from realm.qa.datasets.generic import load_qa_jsonl, load_qa_tsv
from realm.qa.datasets.nq import load_hf_nq_open, load_nq_open
from realm.qa.datasets.squad import load_squad
from realm.qa.datasets.webquestions import (
    load_hf_web_questions,
    load_webquestions_brmson,
    load_webquestions_drqa,
    load_webquestions_stanford,
    parse_target_value,
)

Task = Literal["nq", "wq", "ct", "squad", "jsonl", "dpr"]

__all__ = [
    "DataFileError",
    "LoadStats",
    "QAExample",
    "load_curatedtrec_drqa",
    "load_curatedtrec_tsv",
    "load_dpr_qas",
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
    - ``dpr``: DPR's qas format (``load_dpr_qas``): NQ and TriviaQA as DPR, RAG and FiD split them.
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
            keys = _json_array_keys(existing_file(path, "QA data"))
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
    if task == "dpr":
        return load_dpr_qas(path, **kw)
    raise ValueError(f"task must be nq, wq, ct, squad, jsonl or dpr, got {task!r}")
