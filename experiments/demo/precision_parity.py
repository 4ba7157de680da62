"""Learning parity of bf16 against fp32: the demo under both precisions on the same seeds.

The protocol (rows, seeds, endpoints, decision rule) is in experiments/demo/log/2026-11-28-precision.md and was fixed
before the runs. Each run is ``realm demo`` as its own process (``--precision P --seed S``), one at a time; ``--scale
ci`` (the default) adds the flags of ``tests/integration/cli/test_demo_learns.py``, ``--scale demo`` runs the demo at
its defaults, as the README's command does. A run whose ``summary.json`` exists is read, not re-run, so an interrupted
bench continues where it stopped.

Run from the repository root, with nothing else on the cores:
``python -m experiments.demo.precision_parity --seeds 0 1 2 3 4 --json runs/parity.json`` (about 3 minutes a run on 2 cores);
``python -m experiments.demo.precision_parity --scale demo --seeds 0 1 2 3 4 --json runs/parity-demo.json`` (8-11 minutes a run).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from benchmarks.harness import REPO, emit, run_realm  # isort:skip  (first: no hub, no W&B)

from tests.integration.cli.test_demo_learns import COMMAND

ENDPOINTS = ("heldout_accuracy_retrieval", "gold_recall_at_k_end", "qa_exact_match_end")
"""The decision's endpoints (experiments/demo/log/2026-11-28-precision.md); ``wall_seconds`` is reported beside them."""
PRECISIONS = ("fp32", "bf16")
SCALES = {"ci": COMMAND, "demo": []}
"""The flags each scale adds to ``realm demo``: the CI-sized world of the test, or the demo's own defaults."""


def run_one(out: Path, seed: int, precision: str, threads: int, flags: list[str]) -> dict:
    """The summary of ``realm demo`` at this seed and precision (read from ``out`` if that run finished before)."""
    summary = out / f"{precision}-s{seed}" / "summary.json"
    if not summary.exists():
        argv = ["demo", f"--out={summary.parent}", f"--seed={seed}", f"--precision={precision}",
                f"--num_threads={threads}", *flags]  # fmt: skip
        run_realm(argv, out / "logs" / f"{precision}-s{seed}.log")
    return json.loads(summary.read_text())


def decide(runs: dict[str, dict[int, dict]]) -> dict[str, dict]:
    """Per endpoint: each precision's figures by seed, min / median / max, the paired bf16 - fp32 differences, and
    whether bf16 passes the rule (no bf16 run below the lowest fp32 run; bf16 median >= fp32 median minus half the
    fp32 range)."""
    verdict = {}
    for name in ENDPOINTS:
        fp32 = [runs["fp32"][s][name] for s in sorted(runs["fp32"])]
        bf16 = [runs["bf16"][s][name] for s in sorted(runs["bf16"])]
        half_range = (max(fp32) - min(fp32)) / 2
        verdict[name] = {
            "fp32": fp32,
            "bf16": bf16,
            "fp32_min_median_max": [min(fp32), statistics.median(fp32), max(fp32)],
            "bf16_min_median_max": [min(bf16), statistics.median(bf16), max(bf16)],
            "paired_bf16_minus_fp32": [b - f for b, f in zip(bf16, fp32)],
            "passes": min(bf16) >= min(fp32) and statistics.median(bf16) >= statistics.median(fp32) - half_range,
        }
    return verdict


def format_table(result: dict) -> str:
    seeds = result["seeds"]
    lines = [f"{result['scale']} demo, seeds {seeds};{'':8}" + "".join(f"{'s' + str(s):>8}" for s in seeds)
             + f"{'min':>8}{'median':>8}{'max':>8}"]  # fmt: skip
    for name, v in result["endpoints"].items():
        for precision in PRECISIONS:
            row = v[precision]
            lines.append(f"{name:<34}{precision:>6}" + "".join(f"{x:8.3f}" for x in row)
                         + "".join(f"{x:8.3f}" for x in v[f"{precision}_min_median_max"]))  # fmt: skip
        lines.append(f"{'':34}{'diff':>6}" + "".join(f"{x:+8.3f}" for x in v["paired_bf16_minus_fp32"])
                     + f"   {'passes' if v['passes'] else 'FAILS'}")  # fmt: skip
    for precision in PRECISIONS:
        walls = result["wall_seconds"][precision]
        lines.append(f"{'wall seconds':<34}{precision:>6}" + "".join(f"{x:8.0f}" for x in walls))
    ratio = statistics.median(b / f for b, f in zip(result["wall_seconds"]["bf16"], result["wall_seconds"]["fp32"]))
    lines.append(f"bf16 wall / fp32 wall, median over seeds: {ratio:.2f}")
    lines.append(f"decision: bf16 {'meets' if result['bf16_passes'] else 'does not meet'} the rule on every endpoint")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--scale", choices=sorted(SCALES), default="ci")
    p.add_argument("--out", default=None, help="default runs/parity (ci) or runs/parity-demo (demo)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    out = Path(args.out or REPO / "runs" / ("parity" if args.scale == "ci" else f"parity-{args.scale}"))
    runs: dict[str, dict[int, dict]] = {precision: {} for precision in PRECISIONS}
    for seed in args.seeds:  # note: seed by seed, both precisions back to back, so load drift hits both alike
        for precision in PRECISIONS:
            runs[precision][seed] = run_one(out, seed, precision, args.threads, SCALES[args.scale])
    endpoints = decide(runs)
    result = {
        "scale": args.scale,
        "seeds": args.seeds,
        "endpoints": endpoints,
        "wall_seconds": {p: [runs[p][s]["wall_seconds"] for s in args.seeds] for p in PRECISIONS},
        "bf16_passes": all(v["passes"] for v in endpoints.values()),
    }
    emit(result, format_table(result), args.json)


if __name__ == "__main__":
    main()
