"""``realm knnlm sweep``: perplexity over a grid of k, tau and lambda, from one LM pass and one search.

    realm knnlm sweep --lm.model=LM_DIR --datastore=DATASTORE --data.path=heldout.jsonl --out=RESULTS \
        --sweep.ks=[16,64,256,1024] --sweep.taus=[1,3,10] --sweep.lambdas=[0.1,0.25,0.5,0.65]

Writes ``RESULTS/sweep.jsonl`` (one row per setting) and ``RESULTS/summary.json`` (the lowest row, with
``"chosen_on"`` saying it was chosen on this same data), logs the grid to the trackers as a table, and ``realm report
RESULTS`` plots it. A sweep *describes* the data it runs on, so its lowest perplexity is optimistic; ``realm knnlm
tune`` chooses on a validation split and reports a test split once, with an interval.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from realm.core.atomic import write_text_atomic
from realm.core.checks import Problems
from realm.core.config import config_from_command_line
from realm.core.errors import run_command
from realm.core.logging import init_logging
from realm.core.tracking import log_wandb_table
from realm.knnlm import perplexity as ev
from realm.knnlm_jobs.evaluate_lm import (
    SUMMARY_FILE,
    SWEEP_FILE,
    KNNLMEvalConfig,
    finish,
    prepare,
    require,
)

CHOSEN_ON = "this same data (a description of it, optimistic as a result: realm knnlm tune chooses on validation)"


@dataclass(kw_only=True, slots=True)
class SweepGrid:
    """The settings swept: every combination of k, tau and lambda."""

    ks: list[int] = field(default_factory=lambda: [8, 32, 128, 512, 1024])
    taus: list[float] = field(default_factory=lambda: [1.0, 3.0, 10.0])
    lambdas: list[float] = field(default_factory=lambda: [0.1, 0.25, 0.5, 0.65])

    def __post_init__(self) -> None:
        problems = Problems()
        if not self.ks or not self.taus or not self.lambdas:
            problems.add("sweep.ks, sweep.taus and sweep.lambdas must be non-empty")
        problems.raise_if_any()


@dataclass(kw_only=True, slots=True)
class KNNLMSweepConfig(KNNLMEvalConfig):
    sweep: SweepGrid = field(default_factory=SweepGrid)

    def __post_init__(self) -> None:
        problems = Problems()
        problems.check(KNNLMEvalConfig.__post_init__, self)
        self.knn.k = max(self.knn.k, max(self.sweep.ks))  # note: one search of the largest k serves every k of the grid
        problems.raise_if_any()


def run(cfg: KNNLMSweepConfig) -> list[dict]:
    prepared = prepare(cfg, "knnlm_sweep")
    rows = ev.sweep(prepared.neighbours, cfg.sweep.ks, cfg.sweep.taus, cfg.sweep.lambdas)
    for step, row in enumerate(rows):
        prepared.metrics.log({f"sweep/{k}": v for k, v in row.items()}, step=step)
    out = Path(cfg.out)
    write_text_atomic(out / SWEEP_FILE, "".join(json.dumps(r) + "\n" for r in rows))
    summary = {**ev.best(rows), "chosen_on": CHOSEN_ON, "datastore": prepared.datastore}
    write_text_atomic(out / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
    log_wandb_table(prepared.accelerator, "knnlm/sweep", (list(rows[0]), [list(r.values()) for r in rows]), 0)
    finish(prepared)
    return rows


def main(argv: list[str] | None = None) -> int:
    cfg = config_from_command_line(KNNLMSweepConfig, argv, "realm knnlm sweep", __doc__.splitlines()[0])
    require(cfg, "out", "data.path", "lm.model", "datastore")
    init_logging()
    rows = run(cfg)
    best = ev.best(rows)
    print(f"{len(rows)} settings; LM perplexity {best['ppl_lm']:.3f}; lowest kNN-LM {best['ppl_knnlm']:.3f} at "
          f"k={best['k']}, tau={best['tau']}, lambda={best['lambda']}, chosen on this same data (optimistic: "
          f"`realm knnlm tune` chooses on validation and reports test); {cfg.out}/{SWEEP_FILE}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(run_command("realm knnlm sweep", main, sys.argv[1:]))
