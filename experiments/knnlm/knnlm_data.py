"""``experiments/knnlm/knnlm.py``'s real text: SQuAD dev's paragraphs and the FlashRAG passages, split by article into T
(the LM's training text), U (unseen in-domain), E (held-out evaluation) and V (validation: articles of their own,
disjoint from E's, where tau and lambda are chosen), written as jsonl corpora."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from realm.data.corpus import read_json_object
from realm.knnlm.splits import assign_articles, check_disjoint


def load_articles(data: Path, sources: list[str]) -> dict[str, list[tuple[str, list[str]]]]:
    """{source: [(title, [document texts])]} of ``sources``: SQuAD dev's paragraphs (squad), the FlashRAG passages by
    title (wiki), the Vital Articles' lead sections, one document each (vital). Titles are compared with
    underscores as spaces, case-folded: a Vital article already in another source is left out (its lead section
    would repeat that article's text in another split)."""
    out: dict[str, list[tuple[str, list[str]]]] = {}
    if "squad" in sources:
        squad = json.loads((data / "squad/dev-v1.1.json").read_text())["data"]
        out["squad"] = [(a["title"], [p["context"] for p in a["paragraphs"]]) for a in squad]
    if "wiki" in sources:
        passages: dict[str, list[str]] = {}
        for line in (data / "wikipedia_passages/sample_data.jsonl").read_text().splitlines():
            title, _, body = json.loads(line)["contents"].partition("\n")
            passages.setdefault(title.strip().strip('"'), []).append(body)
        out["wiki"] = list(passages.items())
    if "vital" in sources:
        taken = {_key(title) for articles in out.values() for title, _ in articles}
        vital = [d for d in read_json_object(data / "wikipedia_vital10k/summaries_en-us.json", text_field="extract")
                 if d.text]  # fmt: skip
        out["vital"] = [(d.title, [d.text]) for d in vital if _key(d.title) not in taken]
        left_out = len(vital) - len(out["vital"])
        print(json.dumps({"vital_articles": len(out["vital"]), "left_out_as_in_another_source": left_out}), flush=True)
    return out


def _key(title: str) -> str:
    return title.replace("_", " ").strip().casefold()


def write_splits(args: argparse.Namespace, work: Path) -> dict[str, dict]:
    """E / V / U / T by article (``realm.knnlm.splits``), T+U, written as jsonl; their sizes and paths.

    Each source's articles are cut separately (so every split holds both), in sha256 order of ``source/title`` by
    cumulative words: E ``eval_share``, V ``valid_share``, U ``unseen_share``, T the rest. No title may then be in two
    splits, across sources too (refused: the same article in SQuAD and in the passages would leak)."""
    shares = {"E": args.eval_share, "V": args.valid_share, "U": args.unseen_share}
    splits: dict[str, list[dict]] = {"T": [], "U": [], "E": [], "V": []}
    for source, articles in load_articles(Path(args.data), args.sources).items():
        words = [(f"{source}/{title}", sum(len(t.split()) for t in docs)) for title, docs in articles]
        part = assign_articles(words, shares, rest="T")
        for title, docs in articles:
            records = [{"id": f"{source}-{title}-{i}", "title": title, "text": t} for i, t in enumerate(docs)]
            splits[part[f"{source}/{title}"]] += records
    check_disjoint({name: [r["title"] for r in records] for name, records in splits.items()})
    if args.max_docs:  # note: T and U keep their shares of the documents, whole articles first
        unseen = round(args.max_docs * args.unseen_share / (1 - args.eval_share - args.valid_share))
        splits["T"], splits["U"] = splits["T"][: args.max_docs - unseen], splits["U"][:unseen]
    for name in ("E", "V"):  # note: evenly spread over the split's articles (exact search costs tokens x entries)
        if args.eval_docs and args.eval_docs < len(splits[name]):
            picks = np.unique(np.linspace(0, len(splits[name]) - 1, args.eval_docs).round().astype(int))
            splits[name] = [splits[name][i] for i in picks]
    splits["TU"] = splits["T"] + splits["U"]
    info = {}
    for name, records in splits.items():
        path = work / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        info[name] = {"path": str(path), "documents": len(records), "articles": len({r["title"] for r in records})}
    return info
