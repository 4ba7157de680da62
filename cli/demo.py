"""``realm demo``: the whole REALM pipeline on the embedded synthetic world, on CPU, with no downloads.

world -> vocabulary -> blocks -> reader warm-up -> ICT -> pre-training (trainer + live index builder) -> held-out
evaluation -> QA fine-tuning. The stages are ``realm.pipeline.demo``; this command reads its flags into a
``DemoConfig``, runs them and prints the table (``RUN/summary.json`` holds the figures).
"""

from __future__ import annotations

import argparse
import sys

from realm.cli.summary_table import format_rows
from realm.core.errors import run_command
from realm.core.logging import init_logging, set_num_threads
from realm.pipeline.demo import DemoConfig, run_demo
from realm.pipeline.warm_start import WarmStartConfig


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="realm demo", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/demo", help="run directory (default runs/demo)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--entities", type=int, default=2000, help="entities in the generated world")
    parser.add_argument(
        "--vocab-size",
        type=int,
        default=12000,
        help="WordPiece entries (the default is large enough for every generated name to be one)",
    )
    parser.add_argument(
        "--warmup-steps", type=int, default=None, help="override the reader warm-up steps (0 skips the stage)"
    )
    parser.add_argument("--ict-steps", type=int, default=None, help="override the ICT steps of configs/ict/demo.yaml")
    parser.add_argument("--steps", type=int, default=None, help="override the pre-training steps")
    parser.add_argument("--threads", type=int, default=0, help="trainer threads (0: torch default)")
    parser.add_argument("--qa-steps", type=int, default=None, help="override the QA fine-tuning steps (0 skips QA)")
    parser.add_argument(
        "--qa-dev", type=int, default=500, help="evaluate QA on the first N held-out questions (default 500; 0: all)"
    )
    parser.add_argument("--precision", default="auto", choices=["fp32", "bf16", "auto"],
                        help="every stage's train.precision (auto: bf16 where the CPU or GPU computes it natively)")
    parser.add_argument("--clean-warm-start", action="store_true",
                        help="the reader warm-up and ICT skip the held-out entities' articles (DemoConfig."
                             "warm_start_reads_heldout; held-out accuracy then falls far: docs/evidence.md)")
    parser.add_argument("--warmup-config", default="configs/warmup/demo.yaml")
    parser.add_argument("--ict-config", default="configs/ict/demo.yaml")
    parser.add_argument("--config", default="configs/pretrain/demo.yaml")
    parser.add_argument("--qa-config", default="configs/finetune/demo.yaml")
    return parser.parse_known_args(argv)


def demo_config(args: argparse.Namespace, overrides: list[str]) -> DemoConfig:
    """The demo's typed config from its flags; ``overrides`` (``--section.key=value``) go to pre-training."""
    warm = WarmStartConfig(warmup_config=args.warmup_config, ict_config=args.ict_config,
                           warmup_steps=args.warmup_steps, ict_steps=args.ict_steps)  # fmt: skip
    return DemoConfig(
        out=args.out, seed=args.seed, num_entities=args.entities, vocab_size=args.vocab_size, warm_start=warm,
        pretrain_config=args.config, pretrain_steps=args.steps, pretrain_overrides=list(overrides),
        finetune_config=args.qa_config, qa_steps=args.qa_steps, max_dev_questions=args.qa_dev,
        num_threads=args.threads, precision=args.precision, warm_start_reads_heldout=not args.clean_warm_start,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args, overrides = parse_args(argv)
    init_logging()
    set_num_threads(args.threads)
    summary = run_demo(demo_config(args, overrides))
    print(format_table(summary))
    return 0


def format_table(summary: dict) -> str:
    rows = [
        ("held-out accuracy, with retrieval", summary["heldout_accuracy_retrieval"]),
        ("held-out accuracy, closed book", summary["heldout_accuracy_closed_book"]),
        (f"gold recall@{summary['k']} before pre-training", summary["gold_recall_at_k_start"]),
        (f"gold recall@{summary['k']} after pre-training", summary["gold_recall_at_k_end"]),
        ("index refreshes", summary["num_index_refreshes"]),
        *(
            [
                ("QA exact match before fine-tuning", summary["qa_exact_match_start"]),
                ("QA exact match after fine-tuning", summary["qa_exact_match_end"]),
            ]
            if "qa_exact_match_end" in summary
            else []
        ),
        ("trainer wait fraction", summary["trainer_wait_fraction"]),
        ("wall seconds", summary["wall_seconds"]),
    ]
    return format_rows("REALM demo", rows)


if __name__ == "__main__":
    raise SystemExit(run_command("realm demo", main, sys.argv[1:]))
