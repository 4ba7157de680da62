"""Several runs of ``experiments/demo/evidence.py``, summarised: how far one run's table can be trusted.

One run of the evidence table is one training trajectory per row, and at a high retriever learning rate the same row can
land 0.2 apart in two runs (experiments/demo/log/2026-11-25-evidence.md, "Index freshness"). Given the ``--json`` tables
of several runs (other seeds, same options), this prints each row's mean held-out span accuracy and gold recall with the
standard error over runs, and for each pair of rows the *paired* difference (both rows of a run share its world,
vocabulary, warm-up and ICT start), with its standard error and in how many runs it was positive. Tables that have the
starting model's figures (``start``) also give each row's gain over it (the standard errors:
``experiments/common/stats.py``).

    for s in 0 1 2 3; do
      python -m experiments.demo.evidence --seed $s --steps 600 --refresh 1 --rows realm,stale_30x,frozen \\
        --set optim.retriever_lr_scale=1.0 --out runs/evidence-$s --json runs/evidence-$s.json
    done
    python -m experiments.demo.evidence_runs runs/evidence-*.json
"""

from __future__ import annotations

import argparse
import json
import sys
from itertools import combinations
from pathlib import Path

from experiments.common.stats import mean_and_error

START = "start"  # experiments/demo/evidence.py's figures of the shared starting model, before pre-training


def recall(row: dict) -> float:
    return next(v for k, v in row.items() if k.startswith("gold_recall@"))


def summarise(tables: list[dict]) -> str:
    """The markdown summary of ``tables`` (``experiments/demo/evidence.py --json`` contents, one per run)."""
    # note: in the order experiments/demo/evidence.py wrote them; "prepare" is the shared start's time, not a row
    rows = [name for name in tables[0] if name != "prepare" and all(name in table for table in tables)]
    if not rows:
        raise ValueError("no row is in every table")
    lines = [
        f"{len(tables)} runs; mean ± standard error over runs",
        "",
        "| row | held-out span acc | gold recall@k | per run |",
        "|---|---|---|---|",
    ]
    for name in rows:
        acc = [table[name]["span_accuracy"] for table in tables]
        rec = [recall(table[name]) for table in tables]
        (a, a_err), (r, r_err) = mean_and_error(acc), mean_and_error(rec)
        per_run = " ".join(f"{v:.3f}" for v in acc)
        lines.append(f"| {name} | {a:.3f} ± {a_err:.3f} | {r:.3f} ± {r_err:.3f} | {per_run} |")
    lines += ["", "| paired difference | span acc | positive in | per run |", "|---|---|---|---|"]
    for first, second in combinations(rows, 2):
        if first == START:  # note: the starting model is the baseline: a row's gain over it reads as row − start
            first, second = second, first
        diffs = [table[first]["span_accuracy"] - table[second]["span_accuracy"] for table in tables]
        mean, err = mean_and_error(diffs)
        positive = sum(d > 0 for d in diffs)
        per_run = " ".join(f"{d:+.3f}" for d in diffs)
        lines.append(f"| {first} − {second} | {mean:+.3f} ± {err:.3f} | {positive} of {len(diffs)} | {per_run} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tables", nargs="+", type=Path, help="experiments/demo/evidence.py --json files, one per run")
    args = parser.parse_args(argv)
    tables = []
    for path in args.tables:
        try:
            tables.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError) as err:
            parser.error(f"{path}: not a readable evidence table ({err})")
    try:
        print(summarise(tables))
    except ValueError as err:
        parser.error(str(err))
    return 0


if __name__ == "__main__":
    sys.exit(main())
