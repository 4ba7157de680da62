"""``realm evaluate``: exact match and top-k retrieval accuracy of a fine-tuned QA model on a question file.

    realm evaluate OUT --task nq --data NQ-open.dev.jsonl [--name test] [--batch-size 16] [--report_to wandb]

OUT is a ``realm finetune`` output folder: its ``model/``, ``tokenizer/`` and frozen index are used, and the
candidates its manifest records (``retrieval.candidates``: the dense search, or BM25 ranked here). Writes
``OUT/eval/NAME/predictions.jsonl`` (question, gold answers, prediction, top-k block ids, titles, scores,
has_answer) and ``metrics.json``, and prints the metrics.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from realm.core.argparser import ArgumentParser
from realm.core.atomic import write_text_atomic
from realm.core.config import from_dict, load_config
from realm.core.errors import ArgumentError, run_command
from realm.core.logging import init_logging, set_num_threads
from realm.core.precision import PRECISIONS
from realm.core.process_exit import exit_code_after_run
from realm.core.tracking import TrackingConfig, init_trackers, log_wandb_table
from realm.data.block_store import BlockStore
from realm.data.blocks import check_blocks_tokenizer
from realm.data.vocab import load_tokenizer
from realm.finetune.task import TASKS, TaskConfig
from realm.index import versions
from realm.models.reader import ReaderConfig
from realm.qa.candidates import RetrievalConfig
from realm.qa.model import OpenQAModel
from realm.qa.prediction_table import PREDICTIONS_KEY, prediction_rows
from realm.qa.qa_eval import DEFAULT_TOP_K, evaluate_qa
from realm.run import publication
from realm.run.export_retrieval import write_retrieval_files
from realm.training.accelerator import build_accelerator, use_fast_kernels

logger = logging.getLogger(__name__)

PREDICTIONS_FILE = "predictions.jsonl"
METRICS_FILE = "metrics.json"


def write_evaluation(
    out_dir: Path, name: str, metrics: dict[str, Any], records: list[dict], accelerator: Any = None, step: int = 0,
    store: BlockStore | None = None,
) -> Path:
    """``OUT/eval/NAME/{predictions.jsonl, metrics.json}`` (each written to a temporary name, then renamed), with
    ``store`` (the index's blocks) the retrieval as DPR ``ctxs`` records and a TREC run too
    (``realm.run.export_retrieval``), and the predictions table in W&B when a W&B tracker is active."""
    folder = Path(out_dir) / "eval" / name
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(folder / PREDICTIONS_FILE, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    write_text_atomic(folder / METRICS_FILE, json.dumps(metrics, indent=2) + "\n")
    if store is not None:
        write_retrieval_files(folder, records, store)
    if accelerator is not None:
        log_wandb_table(accelerator, PREDICTIONS_KEY, prediction_rows(records), step)
    return folder


def load_qa_run(out_dir: str | Path, blocks: str = ""):
    """(model, tokenizer, frozen index, reader config, manifest) of a ``realm finetune`` output folder, wherever it
    has moved (the paths its manifests record are found by ``realm.run.paths``'s rule); ``blocks`` overrides where
    the index's blocks are."""
    from realm.finetune.setup import MODEL_DIR, index_blocks, qa_context

    out = Path(out_dir)
    manifest = publication.read_manifest(out / MODEL_DIR)
    if manifest is None:
        raise FileNotFoundError(f"{out} has no published {MODEL_DIR}/ (is it a `realm finetune` output folder?)")
    reader = load_config(ReaderConfig, overrides=manifest["reader"])
    # note: a model published before the option existed read the dense search's blocks
    retrieval = load_config(RetrievalConfig, overrides=manifest.get("retrieval", {}))
    tokenizer = load_tokenizer(out / manifest["tokenizer"])
    index_path = Path(manifest["index"])
    if not index_path.is_dir():  # note: the folder was moved; its own index is where it was, relatively
        index_path = out / "index" / index_path.name
    index = versions.load_index_version(index_path)
    blocks = index_blocks(index, blocks)
    check_blocks_tokenizer(blocks, tokenizer)
    publication.verify_published(out / MODEL_DIR)
    model = OpenQAModel.from_pretrained(out / MODEL_DIR)
    return model, qa_context(index, tokenizer, reader, retrieval, blocks), manifest


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = ArgumentParser(prog="realm evaluate", description=__doc__.splitlines()[0])
    parser.add_argument("out", help="a realm finetune output folder")
    parser.add_argument("--task", required=True, choices=TASKS)
    parser.add_argument("--data", required=True, help="question file (or hf:<split> for nq / wq)")
    parser.add_argument("--name", default=None, help="folder under OUT/eval (default: the data file's stem)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-questions", type=int, default=0, help="only the first N questions (0: all)")
    parser.add_argument("--top-k", default=",".join(map(str, DEFAULT_TOP_K)), help="retrieval accuracy cut-offs")
    parser.add_argument("--skip-malformed", action="store_true", help="skip and count malformed records")
    parser.add_argument("--question-field", default="question", help="jsonl task only")
    parser.add_argument("--answers-field", default="answers", help="jsonl task only")
    parser.add_argument("--regex", action="store_true", help="jsonl task only: answers are regular expressions")
    parser.add_argument("--blocks", default="", help="the frozen index's blocks, when they moved apart from the run "
                        "(default: where the index's manifest records them, or where the run's move took them)")
    parser.add_argument("--report_to", default="none", help="none, wandb, tensorboard or all")
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0: torch's default)")
    parser.add_argument("--precision", default="auto", choices=PRECISIONS,
                        help="autocast of the evaluation (auto: bf16 where the device computes it natively)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    init_logging()
    set_num_threads(args.threads)
    return _evaluate(args)


def _evaluate(args: argparse.Namespace) -> int:
    out = Path(args.out)
    task = from_dict(TaskConfig, {"name": args.task, "question_field": args.question_field,
                                  "answers_field": args.answers_field, "regex": args.regex,
                                  "skip_malformed": args.skip_malformed}, where="realm evaluate")  # fmt: skip
    tracking = from_dict(TrackingConfig, {"report_to": args.report_to}, where="realm evaluate")
    try:
        top_k = tuple(int(k) for k in args.top_k.split(","))
    except ValueError:
        raise ArgumentError(f"--top-k must be comma-separated integers, got {args.top_k!r}") from None
    model, ctx, manifest = load_qa_run(out, args.blocks)
    questions = ctx.question_set(task.load(args.data, args.max_questions), max(top_k))
    accelerator = build_accelerator(tracking, out, args.precision)
    init_trackers(accelerator, tracking, out, {"data": args.data, "task": args.task}, job_type="evaluate")
    use_fast_kernels(model, accelerator, ctx.reader.max_sequence_length)
    metrics, records = evaluate_qa(
        model.to(accelerator.device),
        questions,
        ctx,
        batch_size=args.batch_size,
        top_k=top_k,
        accelerator=accelerator,
    )
    if accelerator.is_main_process:
        name = args.name or Path(args.data).stem
        folder = write_evaluation(out, name, metrics, records, accelerator, int(manifest.get("step", 0)), ctx.store)
        print(json.dumps({"predictions": str(folder / PREDICTIONS_FILE), **metrics}, indent=2))
    accelerator.end_training()
    return exit_code_after_run(accelerator.num_processes, 0)


if __name__ == "__main__":
    raise SystemExit(run_command("realm evaluate", main, sys.argv[1:]))
