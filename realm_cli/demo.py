"""``realm demo``: the whole REALM pipeline on the embedded synthetic world, on CPU, with no downloads.

world -> WordPiece vocabulary -> blocks -> reader warm-up of the from-scratch encoder (``realm warmup``: what BERT's
own pre-training gives REALM) -> ICT warm start of the retriever -> pre-training (trainer + live index builder as a
child process) -> held-out evaluation with retrieval and closed book -> open-domain QA fine-tuning on questions about
training entities, evaluated on questions about held-out ones. Writes ``RUN/summary.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from finetune.train import FinetuneConfig
from pipeline.stages import finetune_and_evaluate, pretrain_and_evaluate
from pipeline.synthetic import make_world_data
from pipeline.warm_start import WarmStartConfig, encoder_shape, warm_start
from realm.core.atomic import write_text_atomic
from realm.core.config import load_config
from realm.core.errors import run_command
from realm.core.logging import init_logging, set_num_threads
from realm.pretrain.config import PretrainConfig
from realm.run.layout import SUMMARY_FILE
from realm_cli.summary_table import format_rows

logger = logging.getLogger(__name__)


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
    parser.add_argument("--warmup-config", default="configs/warmup/demo.yaml")
    parser.add_argument("--ict-config", default="configs/ict/demo.yaml")
    parser.add_argument("--config", default="configs/pretrain/demo.yaml")
    parser.add_argument("--qa-config", default="configs/finetune/demo.yaml")
    return parser.parse_known_args(argv)


def main(argv: list[str] | None = None) -> int:
    args, overrides = parse_args(argv)
    init_logging()
    set_num_threads(args.threads)
    summary = run_demo(args, overrides)
    print(format_table(summary))
    return 0


def warm_start_config(args: argparse.Namespace) -> WarmStartConfig:
    """The demo's warm start: its two recipes, with the step counts the command line overrides."""
    return WarmStartConfig(
        warmup_config=args.warmup_config, ict_config=args.ict_config, warmup_steps=args.warmup_steps,
        ict_steps=args.ict_steps,
    )  # fmt: skip


def run_demo(args: argparse.Namespace, overrides: list[str]) -> dict:
    t_start = time.perf_counter()
    run = Path(args.out)
    run.mkdir(parents=True, exist_ok=True)
    stages: dict[str, float] = {}

    t = time.perf_counter()
    # note: blocks are cut for the pre-training retriever, the one that embeds them for the index
    max_block_length = load_config(PretrainConfig, args.config, overrides).retriever.max_block_length
    paths = make_world_data(run, args.seed, args.entities, args.vocab_size, max_block_length)
    stages["data_s"] = time.perf_counter() - t
    cfg = load_config(
        PretrainConfig,
        args.config,
        [
            f"--train.run_dir={run}",
            f"--train.seed={args.seed}",
            f"--train.init_retriever={run / 'ict' / 'retriever'}",
            *([f"--train.init_encoder={run / 'warmup' / 'encoder'}"] if args.warmup_steps != 0 else []),
            f"--data.tokenizer={paths['tokenizer']}",
            f"--data.blocks={paths['blocks']}",
            f"--data.sentences={paths['pretrain']}",
            f"--data.heldout={paths['heldout']}",
            *([f"--train.max_steps={args.steps}"] if args.steps else []),
            *overrides,
        ],
    )
    data = {"tokenizer": str(paths["tokenizer"]), "blocks": str(paths["blocks"])}
    stages |= warm_start(warm_start_config(args), run, args.seed, data, encoder_shape(cfg.model)).seconds

    pretrained = pretrain_and_evaluate(cfg)
    stages |= pretrained.seconds
    start, end, train = pretrained.start, pretrained.end, pretrained.train

    t = time.perf_counter()
    qa = run_qa(args, run, paths) if args.qa_steps != 0 else None
    stages["qa_s"] = time.perf_counter() - t
    summary = {
        "heldout_accuracy_retrieval": end.span_accuracy,
        "heldout_accuracy_closed_book": end.closed_book_span_accuracy,
        "heldout_token_accuracy_retrieval": end.token_accuracy,
        "heldout_token_accuracy_closed_book": end.closed_book_token_accuracy,
        "gold_recall_at_k_start": start.gold_recall_at_k,
        "gold_recall_at_k_end": end.gold_recall_at_k,
        "gold_recall_at_1_start": start.gold_recall_at_1,
        "gold_recall_at_1_end": end.gold_recall_at_1,
        "k": end.k,
        "num_heldout_examples": end.num_examples,
        "num_index_refreshes": train["num_index_refreshes"],
        "trainer_wait_fraction": train["trainer_wait_fraction"],
        "pretrain_steps": train["step"],
        **(qa or {}),
        "wall_seconds": time.perf_counter() - t_start,
        "stage_seconds": stages,
        "definitions": {
            "heldout_accuracy_*": "share of held-out sentences whose masked fact span is predicted exactly "
            "(every wordpiece), argmax of the marginal p(y|x) or of p(y|null, x)",
            "gold_recall_at_k": "share of held-out sentences whose entity's article is among the k retrieved blocks",
            "qa_exact_match_*": "exact match on questions about held-out entities, before / after fine-tuning the "
            "pre-trained model on questions about training entities (realm finetune)",
        },
    }
    write_text_atomic(run / SUMMARY_FILE, json.dumps(summary, indent=2))
    return summary


def run_qa(args: argparse.Namespace, run: Path, paths: dict[str, Path]) -> dict:
    """Fine-tunes the pre-trained run on questions about training entities; evaluates on held-out entities."""
    overrides = {
        "train": {"run_dir": str(run / "qa"), "seed": args.seed, "num_threads": args.threads,
                  **({"max_steps": args.qa_steps} if args.qa_steps else {})},
        "task": {"train": str(paths["questions_train"]), "dev": str(paths["questions_heldout"]),
                 "max_dev_questions": args.qa_dev},
        "init": {"run": str(run)},
    }  # fmt: skip
    return finetune_and_evaluate(load_config(FinetuneConfig, args.qa_config, overrides))


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
