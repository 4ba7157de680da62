"""The demo over a grid of seeds, thread counts and precisions, each run fresh, checked against issue 56's bars.

What a user's machine changes is the rounding: another thread count reduces in another order, another precision rounds
every product differently. So the figure a user sees is a draw from the distribution this grid measures
(experiments/demo/log/2026-11-28-robustness.md holds the protocols that use it). Each run is ``realm demo --seed S
--precision P --num_threads T`` as its own process, its world, vocabulary, warm-up and ICT made from scratch; a run
whose ``summary.json`` exists is read, not re-run, so an interrupted grid continues where it stopped.

``--jobs 2`` runs two 1-thread runs side by side on 2 cores (a run is deterministic at a fixed thread count, so only
its wall changes); runs of more threads than ``cores // jobs`` still run one at a time.

Run from the repository root:
``python -m experiments.demo.demo_grid --seeds 0 1 2 3 4 5 6 7 --threads 1 2 --precisions bf16 --jobs 2 --json runs/grid.json``
(12-35 minutes a run on 2 cores, by CPU and thread count); any other flag is a ``realm demo`` flag given to every run
(a recipe under test, as screen 4's ``--retriever.center_queries=true --qa_steps=200`` was before it became the
default).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.harness import REPO, emit, run_realm  # isort:skip  (first: no hub, no W&B)

from experiments.demo.precision_parity import SCALES

BARS = {"heldout_accuracy_retrieval": 0.65, "gold_recall_at_k_end": 0.90, "qa_exact_match_end": 0.80}
"""Issue 56's bars, met by every run for a recipe to count as robust; recall@4 must also rise from its start."""
COLUMNS = ("heldout_accuracy_retrieval", "heldout_accuracy_closed_book", "gold_recall_at_k_start",
           "gold_recall_at_k_end", "qa_exact_match_end", "wall_seconds")  # fmt: skip


def run_name(precision: str, threads: int, seed: int) -> str:
    return f"{precision}-t{threads}-s{seed}"


def run_one(out: Path, seed: int, precision: str, threads: int, flags: list[str]) -> dict:
    """The summary of ``realm demo`` at this seed, precision and thread count (read back if that run finished)."""
    name = run_name(precision, threads, seed)
    summary = out / name / "summary.json"
    if not summary.exists():
        argv = ["demo", f"--out={summary.parent}", f"--seed={seed}", f"--precision={precision}",
                f"--num_threads={threads}", *flags]  # fmt: skip
        run_realm(argv, out / "logs" / f"{name}.log", threads=threads)
    return json.loads(summary.read_text())


def misses(summary: dict) -> list[str]:
    """The bars this run misses (empty: it meets all of them)."""
    missed = [name for name, bar in BARS.items() if summary.get(name, -1.0) < bar]
    if summary["gold_recall_at_k_end"] <= summary["gold_recall_at_k_start"]:
        missed.append("recall did not rise")
    return missed


def format_table(rows: list[dict]) -> str:
    lines = [f"{'run':<16}" + "".join(f"{c.replace('heldout_accuracy_', 'held_').replace('gold_', ''):>22}"
                                      for c in COLUMNS) + "  bars"]  # fmt: skip
    for row in rows:
        lines.append(f"{row['run']:<16}" + "".join(f"{row[c]:>22.3f}" for c in COLUMNS)
                     + "  " + (", ".join(row["misses"]) or "met"))  # fmt: skip
    for c in COLUMNS[:-1]:
        values = [row[c] for row in rows]
        lines.append(f"{c}: min {min(values):.3f} median {statistics.median(values):.3f} max {max(values):.3f}")
    lines.append(f"every run meets the bars: {all(not row['misses'] for row in rows)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", required=True)
    p.add_argument("--threads", type=int, nargs="+", default=[2])
    p.add_argument("--precisions", nargs="+", choices=("fp32", "bf16"), default=["bf16"])
    p.add_argument("--scale", choices=sorted(SCALES), default="demo")
    p.add_argument("--jobs", type=int, default=1, help="runs side by side, for runs of cores // jobs threads or fewer")
    p.add_argument("--out", default=str(REPO / "runs" / "grid"))
    p.add_argument("--json", default=None)
    args, extra = p.parse_known_args(argv)  # note: the rest are `realm demo` flags, given to every run
    out, cores = Path(args.out), os.cpu_count() or 1
    grid = [(p_, t, s) for t in args.threads for s in args.seeds for p_ in args.precisions]
    narrow = [g for g in grid if g[1] <= cores // max(args.jobs, 1)]
    summaries: dict[tuple, dict] = {}
    for g in grid:  # note: the wide runs one at a time first, so that a side-by-side pair never shares with them
        if g not in narrow:
            summaries[g] = run_one(out, g[2], g[0], g[1], [*SCALES[args.scale], *extra])
    with ThreadPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
        done = pool.map(lambda g: run_one(out, g[2], g[0], g[1], [*SCALES[args.scale], *extra]), narrow)
        summaries |= dict(zip(narrow, done))
    rows = [{"run": run_name(*g), "precision": g[0], "threads": g[1], "seed": g[2], "misses": misses(summaries[g]),
             **{c: summaries[g][c] for c in COLUMNS}} for g in grid]  # fmt: skip
    emit({"scale": args.scale, "rows": rows, "all_meet_bars": all(not r["misses"] for r in rows)},
         format_table(rows), args.json)  # fmt: skip


if __name__ == "__main__":
    main()
