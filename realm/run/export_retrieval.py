"""Retrieval results in the formats other tools read: DPR's ``ctxs`` records and TREC run files.

DPR (``dense_retriever.py``'s output, read by FiD, RAG and most readers since)::

    [{"question": str, "answers": [str], "ctxs": [{"id", "title", "text", "score", "has_answer"}, ...]}, ...]

TREC run (``trec_eval``, ``ir_measures``, pyserini's ``--output-format trec``): ``qid Q0 docid rank score tag``, one
line per retrieved block, ranks from 1. A block's id is its docid (``realm.run.export_index``: the row of the run's
``blocks/``, a string).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from realm.core.atomic import write_text_atomic
from realm.data.block_store import BlockStore

DPR_FILE, TREC_FILE = "retrieval.dpr.json", "run.trec"


def dpr_record(
    question: str,
    answers: Sequence[str],
    block_ids: Sequence[int],
    scores: Sequence[float],
    store: BlockStore,
    has_answer: Sequence[bool] | None = None,
) -> dict[str, Any]:
    """One question's DPR record; ``block_ids`` best first (a negative id, an empty slot, is left out)."""
    kept = [(i, int(b), float(s)) for i, (b, s) in enumerate(zip(block_ids, scores)) if int(b) >= 0]
    titles, texts = store.texts([b for _, b, _ in kept])
    ctxs = [
        {"id": str(b), "title": title, "text": text, "score": score,
         "has_answer": bool(has_answer[i]) if has_answer is not None else None}
        for (i, b, score), title, text in zip(kept, titles, texts)
    ]  # fmt: skip
    return {"question": question, "answers": list(answers), "ctxs": ctxs}


def dpr_records(predictions: Iterable[Mapping[str, Any]], store: BlockStore) -> list[dict[str, Any]]:
    """DPR records of QA prediction records (``realm.qa.qa_eval.evaluate_qa``: question, answers, block_ids, scores,
    has_answer), in order; each keeps its ``id`` as DPR's optional question id."""
    out = []
    for record in predictions:
        dpr = dpr_record(record["question"], record.get("answers", []), record["block_ids"], record["scores"], store,
                         record.get("has_answer"))  # fmt: skip
        if record.get("id") is not None:
            dpr = {"id": str(record["id"]), **dpr}
        out.append(dpr)
    return out


def trec_lines(qid: str, block_ids: Sequence[int], scores: Sequence[float], tag: str = "realm") -> list[str]:
    """``qid Q0 docid rank score tag`` for each retrieved block, best first (empty slots left out)."""
    if any(c.isspace() for c in str(qid)) or not str(qid):
        raise ValueError(f"a TREC query id must be one non-empty word, got {qid!r}")
    kept = [(int(b), float(s)) for b, s in zip(block_ids, scores) if int(b) >= 0]
    return [f"{qid} Q0 {b} {rank} {score:.6f} {tag}" for rank, (b, score) in enumerate(kept, start=1)]


def trec_run(predictions: Iterable[Mapping[str, Any]], tag: str = "realm") -> str:
    """A TREC run of QA prediction records; a record's ``id`` is its query id (whitespace in it becomes ``_``; its
    position when it has none)."""
    lines = []
    for position, record in enumerate(predictions):
        qid = "_".join(str(record.get("id") or "").split()) or str(position)
        lines += trec_lines(qid, record["block_ids"], record["scores"], tag)
    return "".join(f"{line}\n" for line in lines)


def write_retrieval_files(folder: str | Path, predictions: Sequence[Mapping[str, Any]], store: BlockStore,
                          tag: str = "realm") -> tuple[Path, Path]:  # fmt: skip
    """``retrieval.dpr.json`` and ``run.trec`` of ``predictions`` in ``folder`` (each written atomically)."""
    folder = Path(folder)
    write_text_atomic(folder / DPR_FILE, json.dumps(dpr_records(predictions, store), ensure_ascii=False, indent=1))
    write_text_atomic(folder / TREC_FILE, trec_run(predictions, tag))
    return folder / DPR_FILE, folder / TREC_FILE
