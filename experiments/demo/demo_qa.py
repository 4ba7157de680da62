"""The demo's QA stage again, from a finished ``realm demo`` run, with some of its settings changed.

A QA-only row of a screen (experiments/demo/log/2026-11-28-robustness.md, screen 3): the run's own QA config
(``RUN/qa/config.yaml``, what ``realm demo`` fine-tuned with) is loaded, the dotted overrides given here are applied
after it, the run directory is moved to ``--out``, and ``pipeline.stages.finetune_and_evaluate`` (the demo's QA stage)
runs it. The pre-trained run is only read. Prints and, with ``--json``, writes the QA figures, with the run's own QA
figures beside them.

Run from the repository root:
``python -m experiments.demo.demo_qa --run runs/screen3/center-s100 --out runs/screen3/center-s100/qa_center
--retrieval.center_queries=true`` (about a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.harness import BenchError, emit  # isort:skip  (first: no hub, no W&B)

from realm.core.config import load_config
from realm.core.logging import init_logging
from realm.finetune.train import FinetuneConfig
from realm.pipeline.stages import finetune_and_evaluate

QA_FIELDS = ("qa_exact_match_start", "qa_exact_match_end", "qa_top5_accuracy_start", "qa_top5_accuracy_end")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True, help="a finished `realm demo` run directory")
    parser.add_argument("--out", required=True, help="the new QA run directory")
    parser.add_argument("--json", help="write the figures here")
    args, overrides = parser.parse_known_args()
    run = Path(args.run)
    config, summary = run / "qa" / "config.yaml", run / "summary.json"
    if not config.exists() or not summary.exists():
        raise BenchError(f"{run} is not a finished `realm demo` run with QA: no {config} or {summary}")
    init_logging()
    cfg = load_config(FinetuneConfig, str(config), [*overrides, f"--train.run_dir={args.out}"])
    figures = finetune_and_evaluate(cfg)
    before = json.loads(summary.read_text())
    result = {"run": str(run), "overrides": overrides, "qa": figures, "run_qa": {k: before.get(k) for k in QA_FIELDS}}
    lines = [f"{'':<26}{'this QA':>10}{'the run':>10}"]
    lines += [f"{k:<26}{figures[k]:>10.3f}{before.get(k, float('nan')):>10.3f}" for k in QA_FIELDS]
    emit(result, "\n".join(lines), args.json)


if __name__ == "__main__":
    main()
