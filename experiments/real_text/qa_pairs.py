"""Where two QA rows' exact match differs, and why: retrieval or reading? Given each row's ``realm evaluate``
predictions on the same question file (one pair per seed), this counts the questions each row alone gets right
(with the exact McNemar p), splits them by whether both rows read the gold span (so the difference is the reader's)
or only the row that was right read it (the retriever's), and gives each row's reading accuracy (right among the
questions whose gold span is in its read blocks) per question word, pooled over the pairs.

    python -m experiments.real_text.qa_pairs --a runs/roq/minilm/seed{0,1}/qa_ict/eval/nq_3610 \\
                             --b runs/roq/minilm/seed{0,1}/qa_realm/eval/nq_3610 --labels ict realm [--json F]

No assertions: figures for experiments/real_text/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

from benchmarks.harness import BenchError, write_json  # noqa: E402 isort:skip  (first: no hub, no W&B)

from experiments.common.stats import disagreements, mcnemar_p  # noqa: E402

from realm.finetune.evaluate_qa import PREDICTIONS_FILE  # noqa: E402

WORDS = ("who", "when", "where", "what", "which", "how")
"""A question's word is the first of these it starts with (``whom`` counts as ``who``); any other start is ``other``."""


def question_word(question: str) -> str:
    match = re.match(r"\s*(whom|who|when|where|what|which|how)\b", question.lower())
    return "other" if match is None else match.group(1).replace("whom", "who")


def load_predictions(folder: Path) -> list[dict]:
    """The question, correctness and gold-span-read flag of each record of ``realm evaluate``'s
    ``folder/predictions.jsonl``; a missing file or a bad line is a ``BenchError`` naming it."""
    path = Path(folder) / PREDICTIONS_FILE
    if not path.is_file():
        raise BenchError(f"{path}: no such file (run `realm evaluate OUT --name NAME` to make OUT/eval/NAME)")
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            record = json.loads(line)
            records.append({key: record[key] for key in ("question", "correct", "span_in_read_blocks")})
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise BenchError(f"{path}:{number}: not a realm evaluate record ({err!r})") from None
    return records


def compare(a: list[dict], b: list[dict], where: str) -> dict:
    """Counts for one pair of rows on the same questions (``where`` names them in an error)."""
    if [r["question"] for r in a] != [r["question"] for r in b]:
        pairs = enumerate(zip(a, b), 1)
        line = next((i for i, (x, y) in pairs if x["question"] != y["question"]), min(len(a), len(b)) + 1)
        raise BenchError(f"{where}: the two rows hold different questions (first difference at line {line})")
    only = disagreements([r["correct"] for r in a], [r["correct"] for r in b])
    out = {"questions": len(a), "a_only": only[0], "b_only": only[1], "a_only_reading": 0, "b_only_reading": 0,
           "a_only_retrieval": 0, "b_only_retrieval": 0, "words": {}}  # fmt: skip
    for x, y in zip(a, b):
        word = out["words"].setdefault(question_word(x["question"]), Counter())
        word["questions"] += 1
        for side, row in (("a", x), ("b", y)):
            word[f"{side}_read"] += bool(row["span_in_read_blocks"])
            word[f"{side}_right_read"] += bool(row["span_in_read_blocks"] and row["correct"])
        if bool(x["correct"]) != bool(y["correct"]):
            side, right = ("a", x) if x["correct"] else ("b", y)
            word[f"{side}_only"] += 1
            if x["span_in_read_blocks"] and y["span_in_read_blocks"]:
                out[f"{side}_only_reading"] += 1
            elif right["span_in_read_blocks"]:
                out[f"{side}_only_retrieval"] += 1
    for side, rows in (("a", a), ("b", b)):
        out[f"{side}_right"] = sum(bool(r["correct"]) for r in rows)
        out[f"{side}_read"] = sum(bool(r["span_in_read_blocks"]) for r in rows)
    out["mcnemar_p"] = mcnemar_p(out["a_only"], out["b_only"])
    return out


def format_report(pairs: list[dict], labels: tuple[str, str]) -> str:
    a, b = labels
    lines = []
    for i, p in enumerate(pairs):
        lines.append(
            f"pair {i}: {p['questions']} questions; right: {a} {p['a_right']}, {b} {p['b_right']}; gold span read: "
            f"{a} {p['a_read']}, {b} {p['b_read']}; right with one row only: {b} {p['b_only']}, {a} {p['a_only']} "
            f"(exact McNemar p {p['mcnemar_p']:.3f}); of those, both rows read the span (reading): {b} "
            f"{p['b_only_reading']}, {a} {p['a_only_reading']}; only the right row read it (retrieval): {b} "
            f"{p['b_only_retrieval']}, {a} {p['a_only_retrieval']}"
        )
    pooled: dict[str, Counter] = {}
    for p in pairs:
        for word, counts in p["words"].items():
            pooled.setdefault(word, Counter()).update(counts)
    lines += [f"| word | questions (per pair) | {b} only / {a} only | right / gold span read: {a} | {b} |",
              "|---|---|---|---|---|"]
    for word in (*WORDS, "other"):
        c = pooled.get(word)
        if c:
            right, read = ([c[f"{s}_{key}"] for s in ("a", "b")] for key in ("right_read", "read"))
            reading = [f"{n} / {d} ({n / max(d, 1):.3f})" for n, d in zip(right, read)]
            lines.append(f"| {word} | {c['questions'] // len(pairs)} | {c['b_only']} / {c['a_only']} | "
                         f"{reading[0]} | {reading[1]} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", nargs="+", required=True, help="eval folders of the first row (one per seed)")
    parser.add_argument("--b", nargs="+", required=True, help="the second row's, in the same order")
    parser.add_argument("--labels", nargs=2, default=("a", "b"), help="the two rows' names")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if len(args.a) != len(args.b):
        parser.error(f"--a has {len(args.a)} folders and --b {len(args.b)}: one of each per pair")
    try:
        pairs = [compare(load_predictions(x), load_predictions(y), f"{x} against {y}") for x, y in zip(args.a, args.b)]
    except BenchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(format_report(pairs, tuple(args.labels)))
    write_json(args.json, {"labels": args.labels, "pairs": pairs})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
