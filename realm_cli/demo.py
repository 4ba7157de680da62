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
from typing import Any

from accelerate import Accelerator

from finetune.train import FinetuneConfig, Finetuner
from realm.core.config import load_config
from realm.core.errors import run_command
from realm.core.logging import MetricsLogger, init_logging, set_num_threads
from realm.data.blocks import build_blocks_from_config
from realm.data.corpus import CorpusConfig
from realm.data.jsonl import iter_field
from realm.data.vocab import train_wordpiece
from realm.data.world import WorldConfig, generate_world, write_world
from realm.models.bert import ModelConfig
from realm.pretrain.config import PretrainConfig
from realm.pretrain.evaluation import evaluate_heldout
from realm.training.accelerator import enable_tf32
from trainer.loop import Trainer
from warmstart.ict import ICTConfig, train_ict
from warmstart.reader import WarmupConfig, train_warmup

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


def make_world_data(run: Path, seed: int, num_entities: int, vocab_size: int, max_block_length: int) -> dict[str, Path]:
    """The generated world under ``run/world``, its WordPiece vocabulary (``run/tokenizer``) and its corpus cut into
    blocks (``run/blocks``); returns the world's file paths plus ``tokenizer`` and ``blocks``."""
    paths = write_world(generate_world(WorldConfig(seed=seed, num_entities=num_entities)), run / "world")
    tokenizer = train_wordpiece(iter_field([paths["corpus"], paths["pretrain"]], "text"), vocab_size, run / "tokenizer")
    corpus = CorpusConfig(path=str(paths["corpus"]), max_block_length=max_block_length)
    build_blocks_from_config(corpus, tokenizer, run / "blocks")
    return {**paths, "tokenizer": run / "tokenizer", "blocks": run / "blocks"}


def _stage_config(
    cls: type, path: str, section: str, run: Path, paths: dict[str, Path], args: argparse.Namespace,
    steps: int | None, extra: dict | None = None,
):  # fmt: skip
    """The config of a warm-start stage (``warmup``, ``ict``) writing to ``run/<section>`` on the demo's data."""
    train = {"run_dir": str(run / section), "seed": args.seed, **({"max_steps": steps} if steps else {})}
    data = {"tokenizer": str(paths["tokenizer"]), "blocks": str(paths["blocks"])}
    return load_config(cls, path, {"train": train, "data": data, **(extra or {})})


# note: the encoder's shape must be the same in every stage (the warmed-up encoder initialises ICT and
# pre-training), so the pre-training config's shape (its YAML, e.g. configs/pretrain/demo_gpu.yaml, and any
# --model.<key>=V given to the demo) reaches all three; the demo configs' rates are scaled to the width
# (optim.lr_base_width), so the shape is the only thing to change for a larger encoder
SHAPE_KEYS = ("hidden_size", "num_layers", "num_heads", "intermediate_size")


def encoder_shape(model: ModelConfig) -> dict[str, Any]:
    """The shape keys of the pre-training encoder, as the ``model`` section of a warm-start stage's config."""
    return {key: getattr(model, key) for key in SHAPE_KEYS}


def warm_start(args: argparse.Namespace, run: Path, paths: dict[str, Path], shape: dict[str, Any]) -> dict[str, float]:
    """Reader warm-up (unless ``--warmup-steps 0``) into ``run/warmup``, then ICT into ``run/ict``, initialised from
    the warmed-up encoder, both with the encoder ``shape``; returns the seconds of each stage."""
    stages = {}
    warmed_up = args.warmup_steps != 0
    if warmed_up:
        t = time.perf_counter()
        train_warmup(
            _stage_config(
                WarmupConfig, args.warmup_config, "warmup", run, paths, args, args.warmup_steps, {"model": shape}
            )
        )
        stages["warmup_s"] = time.perf_counter() - t
    # note: REALM starts both towers and the encoder from one BERT; here the warmed-up encoder plays BERT's part
    # (measured on the demo world: ICT recall@4 0.674 from it, 0.623 from a random BERT)
    t = time.perf_counter()
    train_ict(
        _stage_config(
            ICTConfig, args.ict_config, "ict", run, paths, args, args.ict_steps,
            {"model": {**shape, **({"init_from": str(run / "warmup" / "encoder")} if warmed_up else {})}},
        )  # fmt: skip
    )
    stages["ict_s"] = time.perf_counter() - t
    return stages


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
    stages |= warm_start(args, run, paths, encoder_shape(cfg.model))

    enable_tf32()
    trainer = Trainer(cfg, Accelerator())

    def evaluate():
        return evaluate_heldout(
            trainer.unwrapped,
            trainer.heldout,
            trainer.store,
            trainer.special,
            cfg.retriever,
            batch_size=cfg.eval.batch_size,
            max_examples=cfg.eval.max_examples,
            gold_titles=trainer.heldout_titles,
        )

    t = time.perf_counter()
    start = evaluate()  # the trainer's starting model: ICT retriever, fresh encoder
    stages["eval_start_s"] = time.perf_counter() - t

    t = time.perf_counter()
    try:
        train = trainer.run()
    finally:
        trainer.close()
    stages["pretrain_s"] = time.perf_counter() - t

    t = time.perf_counter()
    end = evaluate()
    stages["eval_end_s"] = time.perf_counter() - t
    # the before/after evaluations go into the run's metrics too, apart from the trainer's curve (eval/*, on the
    # live index and eval.interval_examples sentences), since these search the whole corpus exactly
    metrics = MetricsLogger(run / "metrics.jsonl")
    metrics.log(start.as_dict("eval_exact/"), 0)
    metrics.log(end.as_dict("eval_exact/"), train["step"])
    metrics.close()

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
    (run / "summary.json").write_text(json.dumps(summary, indent=2))
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
    tuner = Finetuner(load_config(FinetuneConfig, args.qa_config, overrides))
    tuner.train()
    evals = tuner.evaluations
    start, end = evals[0][1], evals[-1][1]
    return {
        "qa_exact_match_start": start["exact_match"],
        "qa_exact_match_end": end["exact_match"],
        "qa_top5_accuracy_start": start["top5_accuracy"],
        "qa_top5_accuracy_end": end["top5_accuracy"],
        "qa_steps": evals[-1][0],
        "qa_num_questions": end["num_questions"],
    }


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
    width = max(len(name) for name, _ in rows)
    lines = [
        f"{name:<{width}}  {value:.3f}" if isinstance(value, float) else f"{name:<{width}}  {value}"
        for name, value in rows
    ]
    return "\n".join(["REALM demo", "-" * (width + 10), *lines])


if __name__ == "__main__":
    raise SystemExit(run_command("realm demo", main, sys.argv[1:]))
