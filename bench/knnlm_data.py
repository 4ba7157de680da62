"""``bench/knnlm.py``'s real text: SQuAD dev's paragraphs and the FlashRAG passages, split by article into T (the LM's
training text), U (unseen in-domain), E (held-out evaluation) and V (validation: other documents of E's articles),
written as jsonl corpora."""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np


def load_articles(data: Path) -> dict[str, list[tuple[str, list[str]]]]:
    """{source: [(title, [document texts])]}: SQuAD dev's paragraphs and the FlashRAG passages by title."""
    squad = json.loads((data / "squad/dev-v1.1.json").read_text())["data"]
    passages: dict[str, list[str]] = {}
    for line in (data / "wikipedia_passages/sample_data.jsonl").read_text().splitlines():
        title, _, body = json.loads(line)["contents"].partition("\n")
        passages.setdefault(title.strip().strip('"'), []).append(body)
    squad_articles = [(a["title"], [p["context"] for p in a["paragraphs"]]) for a in squad]
    return {"squad": squad_articles, "wiki": list(passages.items())}


def write_splits(args: argparse.Namespace, work: Path) -> dict[str, dict]:
    """T / U / E by article (see the module docstring), T+U, written as jsonl; their sizes and paths."""
    splits: dict[str, list[dict]] = {"T": [], "U": [], "E": []}
    for source, articles in load_articles(Path(args.data)).items():
        articles.sort(key=lambda a: hashlib.sha256(f"{source}/{a[0]}".encode()).hexdigest())
        total, seen = sum(len(t.split()) for _, docs in articles for t in docs), 0
        for title, docs in articles:
            fraction = seen / total
            part = "E" if fraction < args.eval_share else "U" if fraction < args.eval_share + args.unseen_share else "T"
            seen += sum(len(t.split()) for t in docs)
            splits[part] += [{"id": f"{source}-{title}-{i}", "title": title, "text": t} for i, t in enumerate(docs)]
    if args.max_docs:  # note: T and U keep their shares of the documents, whole articles first
        unseen = round(args.max_docs * args.unseen_share / (1 - args.eval_share))
        splits["T"], splits["U"] = splits["T"][: args.max_docs - unseen], splits["U"][:unseen]
    if args.eval_docs and args.eval_docs < len(splits["E"]):  # note: evenly spread over E's articles
        picks = np.unique(np.linspace(0, len(splits["E"]) - 1, args.eval_docs).round().astype(int))
        rest = [d for i, d in enumerate(splits["E"]) if i not in set(picks.tolist())]
        splits["E"] = [splits["E"][i] for i in picks]
        # note: V, where tau and lambda are chosen: other documents of E's articles, never the ones reported on
        chosen = np.unique(np.linspace(0, len(rest) - 1, min(args.eval_docs, len(rest))).round().astype(int))
        splits["V"] = [rest[i] for i in chosen]
    splits["TU"] = splits["T"] + splits["U"]
    info = {}
    for name, records in splits.items():
        path = work / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        info[name] = {"path": str(path), "documents": len(records), "articles": len({r["title"] for r in records})}
    return info
