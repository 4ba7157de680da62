"""REALM's comparisons on real text: one corpus (the Wikipedia Vital lead sections), every row through the project's
own pipeline and commands, the same reader budget for every QA row.

    python bench/real_open_qa.py [--work runs/real_open_qa] [--seeds 0 1] [--inits scratch minilm]
                                 [--questions 500] [--qa-rows bm25 start ict realm warm] [--json PATH]
                                 [--set key=value ...] [--gpu] [--through start|ict|realm] [--train-sets SET=FILE]

For each init (``scratch``: the demo-sized encoder with the reader warm-up, no contamination; ``minilm``:
all-MiniLM-L6-v2, a *supervised* init: it was trained on NQ, TriviaQA and SQuAD pairs) and seed, ``run_real_text``
(``realm.pipeline.real_text``, stopped before QA) gives the warm start and the REALM run. Retrievers, each ranking the
blocks for the questions of NQ-open dev, TriviaQA test, WebQuestions test and CuratedTrec test (the first
``--questions`` of each file): ``bm25`` (bm25s over ``title text``), ``start`` (the dense retriever as it starts: the
warmed-up encoder, or MiniLM as it is), ``ict`` (after ICT: ORQA's start) and ``realm`` (after ICT + REALM
pre-training). Columns: held-out salient-span accuracy with retrieval and closed book (``ict``: the run's starting
model, ``realm``: its final one), top-1/5/20 retrieval accuracy over all questions and over those whose answer occurs in
the corpus (``retrieval_accuracy.answerable``), and exact match after QA fine-tuning (``realm finetune``'s recipe from
``configs/real_text/finetune``) from each dense start and, in the ``bm25`` row, from the ICT start reading BM25's
candidates (``retrieval.candidates=bm25``: the same reader, budget and fine-tuning; only the blocks differ), and in the
``warm`` row from ICT's retriever with the reader warm-up's encoder (REALM's own start, so realm - warm is what the
pre-training steps add; for ``scratch`` it is the ``ict`` start again). Closed-book QA has no row: the project's reader
extracts spans from retrieved blocks, so with the null document alone its exact match is 0 by construction; the
closed-book column of the held-out cloze is REALM's own closed-book comparison. ``bench/evidence_runs.py``-style paired
differences (realm - ict and realm - warm, every set, top-20 and EM over answerable questions) with standard errors over
seeds close the table, then per seed the answerable questions only one of the two QA rows gets right, with the exact
McNemar p. Resumable: a finished stage is not rerun, a QA row is fine-tuned once, and its predictions on each set are
read back (``qa_ROW/eval/SET_N/predictions.jsonl`` for N questions, as ``realm evaluate --name SET_N`` writes them), so
another ``--questions`` only evaluates the sets it changes. ``--through start`` (or ``ict``) runs the pipeline only as
far as that retriever needs (MiniLM as it is needs only the blocks in its vocabulary; the scratch start needs the warm
start) and gives the rows up to it: the cheap first look at an init on a machine where its pre-training is too slow.
Every QA row is fine-tuned on NQ (the pipeline's ``qa.train``); ``--train-sets wq=FILE ct=FILE`` also fine-tunes each
row on those sets' own training questions (``qa_ROW_SETtrain``) and takes their EM from there, as the paper does.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time
from pathlib import Path

from harness import REPO, BenchError, minilm_path, write_json  # noqa: E402 isort:skip  (first: no hub, no W&B)

import torch  # noqa: E402
from evidence_runs import disagreements, mcnemar_p, mean_and_error  # noqa: E402
from qa_pairs import load_predictions  # noqa: E402
from retrieval_accuracy import (  # noqa: E402; fmt: skip
    KS,
    accuracy_row,
    answerable,
    dense_rankings,
    embed_questions,
)

from realm.core.config import load_config, merge_sections, parse_overrides, read_yaml  # noqa: E402
from realm.core.logging import init_logging  # noqa: E402
from realm.data.blocks import load_blocks  # noqa: E402
from realm.data.packing import SpecialIds  # noqa: E402
from realm.data.vocab import load_tokenizer  # noqa: E402
from realm.finetune.evaluate_qa import PREDICTIONS_FILE, load_qa_run, write_evaluation  # noqa: E402
from realm.finetune.setup import MODEL_DIR  # noqa: E402
from realm.index.text_bm25 import bm25_rankings, titled_texts  # noqa: E402
from realm.models.retriever import Retriever  # noqa: E402
from realm.pipeline.real_text import RETRIEVER_SHAPE, RealTextConfig, finetune_config, run_real_text  # noqa: E402
from realm.pipeline.stages import finetune_and_evaluate  # noqa: E402
from realm.pretrain.config import PretrainConfig  # noqa: E402
from realm.pretrain.heldout_eval import embed_corpus  # noqa: E402
from realm.pretrain.saved_run import load_run  # noqa: E402
from realm.qa.datasets import load_task  # noqa: E402
from realm.qa.qa_eval import DEFAULT_TOP_K, evaluate_qa  # noqa: E402
from realm.run import live_index, publication  # noqa: E402
from realm.run.layout import CONFIG_FILE, SUMMARY_FILE  # noqa: E402

logger = logging.getLogger("bench.real_open_qa")

SHARED = REPO.parent / "shared" / "data" / "real"
EVAL_SETS = {
    "nq": ("nq", SHARED / "nq_open" / "NQ-open.dev.jsonl"),
    "tqa": ("dpr", SHARED / "dpr_qas" / "topics.dpr.trivia.test.txt"),
    "wq": ("wq", SHARED / "webquestions" / "WebQuestions-test.txt"),
    "ct": ("ct", SHARED / "curatedtrec" / "CuratedTrec-test.txt"),
}
CONFIGS = {"scratch": REPO / "configs/real_text/default.yaml", "minilm": REPO / "configs/real_text/minilm.yaml"}
FULL_LENGTHS = ["--warm_start.warmup_steps=null", "--warm_start.ict_steps=null", "--pretrain_steps=null",
                "--qa_steps=null"]
"""Every stage at its own config's length (null), where ``realm real-text``'s default cuts them to fit 30 minutes."""
GPU_CONFIG = REPO / "configs/real_text/gpu.yaml"
"""``--gpu`` takes this config's ``pretrain_overrides`` (the builder on the trainer's GPU, candidates prefetched)."""
DENSE = ("start", "ict", "realm")
QA_ROWS = ("bm25", *DENSE, "warm")
RETRIEVER_OF = {"warm": "ict"}
"""QA rows whose retriever is another row's: ``warm`` reads with the reader warm-up's encoder from ICT's retriever."""
PAIRS = (("realm", "ict"), ("realm", "warm"))
"""The paired differences: REALM over ORQA's start, and over the same start with the warmed-up reader (what the
REALM pre-training steps alone add)."""


def stop_after(cfg: RealTextConfig, through: str) -> str:
    """The pipeline stage after which ``cfg``'s run has the dense retrievers up to ``through``: the start of an init
    folder is that folder (its blocks suffice), the scratch start is the warmed-up encoder, ICT's is the warm start's
    last stage, REALM's is pre-training."""
    if through == "realm":
        return "pretrain"
    return "data" if through == "start" and cfg.init_from else "warm_start"


def retriever_shape(cfg: RealTextConfig) -> tuple[PretrainConfig, str]:
    """The pre-training config's retriever shape, tokenizer and blocks of ``cfg``'s run (the run's own config once it
    has one; before pre-training, the one the pipeline would write), and the start's BERT folder."""
    out = Path(cfg.out)
    if (out / CONFIG_FILE).is_file():
        pretrain = load_config(PretrainConfig, out / CONFIG_FILE)
    else:
        data = {"data": {"tokenizer": cfg.init_from or str(out / "tokenizer"), "blocks": str(out / "blocks")}}
        pretrain = load_config(PretrainConfig, cfg.pretrain_config,
                               merge_sections(dict(cfg.pretrain_overrides), data, "bench"))  # fmt: skip
    return pretrain, cfg.init_from or str(out / "warmup" / "encoder")


def minilm_folder() -> str:
    try:
        return str(minilm_path())
    except BenchError as err:
        raise SystemExit(f"{err} (or leave minilm out of --inits)") from None


def pipeline_config(init: str, seed: int, work: Path, extra: list[str], gpu: bool = False) -> RealTextConfig:
    """The pipeline of one (init, seed), with ``GPU_CONFIG``'s pre-training overrides where ``gpu`` (under the
    user's own ``--set pretrain_overrides...``, which win key by key); its QA settings are those of every QA row (the
    bench runs the pipeline itself without QA: ``dataclasses.replace(cfg, qa_steps=0)``)."""
    overrides = {"out": str(work / init / f"seed{seed}"), "seed": seed,
                 **({"init_from": minilm_folder()} if init == "minilm" else {})}  # fmt: skip
    user = parse_overrides(FULL_LENGTHS + extra)
    if gpu:
        user["pretrain_overrides"] = merge_sections(read_yaml(GPU_CONFIG)["pretrain_overrides"],
                                                    user.get("pretrain_overrides") or {}, "--set")  # fmt: skip
    return load_config(RealTextConfig, CONFIGS[init], {**user, **overrides})


def block_texts(blocks_dir) -> list[str]:
    """``title body`` of every block: what BM25 indexes and what ``has_answer`` searches."""
    blocks = load_blocks(blocks_dir)
    return titled_texts(blocks["title"], blocks["text"])


def retrievers(cfg: RealTextConfig, names: tuple[str, ...], pretrain: PretrainConfig, bert: str
               ) -> dict[str, Retriever]:  # fmt: skip
    """The dense retrievers ``names`` of one pipeline run: as it starts, after ICT, after REALM (``pretrain`` and
    ``bert``: the run's ``retriever_shape``)."""
    out = Path(cfg.out)
    torch.manual_seed(cfg.seed)  # note: the scratch start's projection is random; seeded, it is the same every time
    load = {"start": lambda: Retriever.from_bert(bert, pretrain.retriever),
            "ict": lambda: Retriever.from_pretrained(out / "ict" / "retriever"),
            "realm": lambda: load_run(out).model.retriever}  # fmt: skip
    return {name: load[name]() for name in names}


def retrieval_rows(cfg: RealTextConfig, names: tuple[str, ...], sets: dict, texts: list[str],
                   bm25: dict) -> dict[str, dict]:  # fmt: skip
    """``{retriever: {set: accuracy row}}`` for the dense retrievers ``names`` of ``cfg``'s run, plus the shared BM25
    rows; ``texts`` are the run's ``block_texts``."""
    pretrain, bert = retriever_shape(cfg)
    tokenizer, blocks = load_tokenizer(pretrain.data.tokenizer), load_blocks(pretrain.data.blocks)
    rows = {}
    device = "cuda" if torch.cuda.is_available() else "cpu"  # note: 13k blocks x 3 retrievers x seeds, on a GPU
    for name, retriever in retrievers(cfg, names, pretrain, bert).items():
        retriever.eval().to(device)
        length = pretrain.retriever.max_block_length
        docs = embed_corpus(retriever.doc_embedder, blocks, SpecialIds.of(tokenizer), length)
        rows[name] = {}
        for set_name, (questions, can_answer) in sets.items():
            queries = embed_questions(retriever, tokenizer, [q.question for q in questions],
                                      pretrain.retriever.max_query_length)  # fmt: skip
            rows[name][set_name] = accuracy_row(dense_rankings(docs, queries, max(KS)), texts, questions, can_answer)
    if "bm25" not in bm25:
        bm25["bm25"] = {}
        for set_name, (questions, can_answer) in sets.items():
            ranked, _ = bm25_rankings(texts, [q.question for q in questions], max(KS))
            bm25["bm25"][set_name] = accuracy_row(ranked, texts, questions, can_answer)
    return {**bm25, **rows}


def qa_rows(cfg: RealTextConfig, sets: dict, names: list[str], own_train: dict | None = None) -> dict[str, dict]:
    """Exact match of QA fine-tuned from each dense start, and from ICT's with BM25's candidates (``bm25``), on every
    set (all / answerable questions). A set in ``own_train`` (``{set: training file}``) is read by the same start
    fine-tuned on that file instead, in ``qa_ROW_SETtrain``, as the paper fine-tunes on each set."""
    own_train = own_train or {}
    out = Path(cfg.out)
    pretrain, bert = retriever_shape(cfg)
    data = {"tokenizer": pretrain.data.tokenizer, "blocks": pretrain.data.blocks}
    starts = {
        "start": {"init": {"bert": bert}, "data": data},
        "ict": {"init": {"bert": bert, "retriever": str(out / "ict" / "retriever")}, "data": data},
        "realm": {"init": {"run": str(out)}},
    }
    # note: ORQA's start with the blocks BM25 proposes, so bm25 - ict is the retriever's share of the QA row
    starts["bm25"] = {**starts["ict"], "retrieval": {"candidates": "bm25"}}
    # note: REALM's own start (warmed-up reader, ICT retriever), so realm - warm is the pre-training's share; for the
    # scratch init the warm-up's encoder is already the start's, and warm is ict again
    starts["warm"] = {**starts["ict"], "init": {**starts["ict"]["init"], "bert": str(out / "warmup" / "encoder")}}
    # note: every start embeds and pools as the pre-training run did, so the rows differ only in their weights
    retriever = {key: getattr(pretrain.retriever, key) for key in RETRIEVER_SHAPE}
    rows = {}

    def fine_tune(qa_dir: Path, start: dict) -> Path:
        if publication.read_manifest(qa_dir / MODEL_DIR) is None:
            finetune_and_evaluate(finetune_config(cfg, qa_dir, {"retriever": retriever, **start}))
        return qa_dir

    for name, sections in ((name, starts[name]) for name in names):
        qa_dir = fine_tune(out / f"qa_{name}", sections)
        rows[name] = exact_match(qa_dir, {s: questions for s, questions in sets.items() if s not in own_train})
        index = live_index.current_index_version(qa_dir) if own_train else None
        if own_train and index is None:
            raise BenchError(f"{qa_dir / 'index'}: no published index to fine-tune {', '.join(own_train)} over")
        for set_name, path in own_train.items():
            # note: the same start and frozen index (the row's own, so not embedded again); no dev set, since the
            # set itself is evaluated next; a malformed training record (a bad regex) is skipped and counted
            init = {**sections.get("init", {}), "index": str(index)}
            task = {"name": EVAL_SETS[set_name][0], "train": path, "dev": "", "dev_name": "", "skip_malformed": True}
            own = fine_tune(out / f"qa_{name}_{set_name}train", {**sections, "init": init, "task": task})
            rows[name] |= exact_match(own, {set_name: sets[set_name]})
    return rows


def exact_match(qa_dir: Path, sets: dict) -> dict[str, dict]:
    """``{set: {em, em_answerable, correct_answerable}}`` of the fine-tuned QA run in ``qa_dir`` on ``sets``; the last
    is one 0/1 per answerable question, in order, for the paired test. Each set's predictions are
    ``qa_dir/eval/SET_N/predictions.jsonl`` (N questions), as ``realm evaluate --name SET_N`` writes them: a set whose
    file holds the same questions is read, not evaluated again."""
    loaded = None
    em = {}
    for set_name, (questions, can_answer) in sets.items():
        name = f"{set_name}_{len(questions)}"
        folder = qa_dir / "eval" / name
        records = load_predictions(folder) if (folder / PREDICTIONS_FILE).is_file() else []
        if [r["question"] for r in records] != [q.question for q in questions]:
            loaded = loaded or load_qa_run(qa_dir)
            model, ctx, manifest = loaded
            # note: the run's own candidates (its manifest's retrieval.candidates), as realm evaluate reads them
            metrics, records = evaluate_qa(model, ctx.question_set(questions, max(DEFAULT_TOP_K)), ctx, batch_size=32)
            write_evaluation(qa_dir, name, metrics, records, step=int(manifest.get("step", 0)))
        hits = [int(bool(r["correct"])) for r in records]
        kept = [h for h, ok in zip(hits, can_answer) if ok]
        em[set_name] = {"em": sum(hits) / len(hits), "em_answerable": sum(kept) / max(len(kept), 1),
                        "correct_answerable": kept}  # fmt: skip
    return em


def format_table(result: dict) -> str:
    """One line per (init, retriever): held-out cloze, then per set top-1/5/20 (answerable) and EM (answerable)."""
    head = "| init | retriever | held-out retrieval / closed book |"
    head += "".join(f" {s} top-1/5/20 (answerable) | {s} EM (answerable) |" for s in EVAL_SETS)
    lines = [head, "|" + "---|" * (3 + 2 * len(EVAL_SETS))]
    for (init, seed), run in sorted(result["runs"].items()):
        for name in (name for name in QA_ROWS if RETRIEVER_OF.get(name, name) in run["retrieval"]
                     and (name not in RETRIEVER_OF or name in run.get("qa", {}))):  # fmt: skip
            cloze = run["cloze"].get(name)
            cells = [init + f" s{seed}", name, f"{cloze[0]:.3f} / {cloze[1]:.3f}" if cloze else ""]
            for s in EVAL_SETS:
                acc = run["retrieval"][RETRIEVER_OF.get(name, name)][s]
                cells.append(" / ".join(f"{acc[f'top_{k}']:.3f}" for k in KS) + " (" +
                             " / ".join(f"{acc[f'top_{k}_answerable']:.3f}" for k in KS) + ")")  # fmt: skip
                em = run.get("qa", {}).get(name, {}).get(s)
                cells.append(f"{em['em']:.3f} ({em['em_answerable']:.3f})" if em else "")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paired(result: dict) -> str:
    """Each of ``PAIRS`` (later - earlier) over seeds, per init and set: mean and standard error of top-20 and EM over
    answerable questions; then, per seed and set, the questions only one of the two QA rows gets right, with the exact
    McNemar p. A pair is left out where a run lacks either row."""
    def top20(run: dict, name: str, set_name: str) -> float | None:
        return run["retrieval"].get(name, {}).get(set_name, {}).get("top_20_answerable")

    def qa(run: dict, name: str, set_name: str) -> dict:
        return run.get("qa", {}).get(name, {}).get(set_name, {})

    columns = (("top-20 answerable", top20), ("EM answerable", lambda r, n, s: qa(r, n, s).get("em_answerable")))
    lines = []
    for init, (later, earlier) in ((i, p) for i in sorted({i for i, _ in result["runs"]}) for p in PAIRS):
        runs = {seed: run for (i, seed), run in result["runs"].items() if i == init}
        for (label, get), set_name in ((column, s) for column in columns for s in EVAL_SETS):
            if label.startswith("top-20") and {earlier, later} & set(RETRIEVER_OF):
                continue  # note: a row with another row's retriever has no top-20 of its own
            values = [(get(r, later, set_name), get(r, earlier, set_name)) for r in runs.values()]
            diffs = [b - a for b, a in values if a is not None and b is not None]
            if diffs:
                mean, err = mean_and_error(diffs)
                spread = f" ± {err:.3f}" if len(diffs) > 1 else ""  # note: one seed has no standard error
                lines.append(f"{init}: {later} - {earlier}, {set_name} {label}: {mean:+.3f}{spread} over "
                             f"{len(diffs)} seed(s), positive in {sum(d > 0 for d in diffs)}")  # fmt: skip
        for seed, set_name in ((seed, s) for seed in sorted(runs) for s in EVAL_SETS):
            rows = [qa(runs[seed], n, set_name).get("correct_answerable") for n in (earlier, later)]
            if None not in rows:  # note: both rows read the same blocks, so their answerable questions are the same
                only_later, only_earlier = disagreements(rows[1], rows[0])
                p = mcnemar_p(only_later, only_earlier)
                lines.append(f"{init} s{seed}: {set_name} answerable questions right with {later} only {only_later}, "
                             f"{earlier} only {only_earlier}, exact McNemar p {p:.3f}")
    return "\n".join(lines)


def done(cfg: RealTextConfig, summary: dict, stage: str) -> bool:
    """Whether ``cfg``'s run already holds what ``stage`` makes: a summary with the held-out figures for pre-training,
    the ICT retriever for the warm start, any summary for the data stage (which writes one after the blocks)."""
    out = Path(cfg.out)
    if stage == "pretrain":
        return "heldout_accuracy_retrieval" in summary
    return (out / "ict" / "retriever").is_dir() if stage == "warm_start" else bool(summary)


def measure(args: argparse.Namespace, names: tuple[str, ...], own_train: dict[str, str]) -> tuple[dict, dict]:
    """Every (init, seed) of ``args``: its pipeline through ``names``' retrievers (stages already done are kept), its
    retrieval and held-out figures and its QA rows (``own_train``: ``qa_rows``'); with the seconds each took."""
    extra = [f"--{item}" for item in args.set]
    sets = {name: load_task(task, str(path))[: args.questions] for name, (task, path) in EVAL_SETS.items()}
    result, bm25, timing = {"runs": {}, "settings": vars(args)}, {}, {}
    for init in args.inits:
        for seed in args.seeds:
            cfg = pipeline_config(init, seed, Path(args.work), extra, args.gpu)
            t = time.perf_counter()
            summary_file = Path(cfg.out) / SUMMARY_FILE
            summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
            stage = stop_after(cfg, args.through)
            if not done(cfg, summary, stage):
                summary = run_real_text(dataclasses.replace(cfg, qa_steps=0, stop_after=stage))
            texts = block_texts(Path(cfg.out) / "blocks")
            answer_sets = {n: (qs, answerable(qs, texts)) for n, qs in sets.items()}
            cloze = {"ict": (summary["heldout_accuracy_retrieval_start"],
                             summary["heldout_accuracy_closed_book_start"]),
                     "realm": (summary["heldout_accuracy_retrieval"], summary["heldout_accuracy_closed_book"])
                     } if "heldout_accuracy_retrieval" in summary else {}  # fmt: skip
            run = {"summary": summary, "answerable": {n: sum(a) for n, (_, a) in answer_sets.items()}, "cloze": cloze,
                   "retrieval": retrieval_rows(cfg, names, answer_sets, texts, bm25)}  # fmt: skip
            if args.qa_rows:
                run["qa"] = qa_rows(cfg, answer_sets, args.qa_rows, own_train)
            timing[f"{init}/seed{seed}"] = time.perf_counter() - t
            result["runs"][(init, seed)] = run
    return result, timing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="runs/real_open_qa")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--inits", nargs="+", choices=sorted(CONFIGS), default=["scratch"])
    parser.add_argument("--questions", type=int, default=500, help="first N questions of each evaluation set")
    parser.add_argument("--qa-rows", nargs="*", choices=QA_ROWS, default=list(QA_ROWS),
                        help="rows to fine-tune for QA: the dense starts, bm25 (ICT's start reading BM25's "
                             "candidates) and warm (ICT's start with the warmed-up reader: REALM's own start); "
                             "none: retrieval and held-out columns only")  # fmt: skip
    parser.add_argument("--train-sets", nargs="*", default=[], metavar="SET=FILE",
                        help="fine-tune each QA row on SET's own training questions too (FILE, in SET's format) and "
                             "take SET's EM from that row, as the paper does (default: every set from NQ's)")
    parser.add_argument("--set", nargs="*", default=[], help="pipeline overrides, e.g. pretrain_steps=200")
    parser.add_argument("--json", default=None)
    parser.add_argument("--gpu", action="store_true",
                        help=f"pre-train with {GPU_CONFIG.relative_to(REPO)}'s overrides: the index builder on the "
                             "trainer's GPU in bf16, each batch's candidates searched while the one before trains")
    parser.add_argument("--through", choices=DENSE, default="realm",
                        help="the last dense retriever to build and measure: start runs only what the init's own "
                             "start needs, ict stops after the warm start; the held-out cloze needs realm")  # fmt: skip
    args = parser.parse_args(argv)
    names = DENSE[: DENSE.index(args.through) + 1]
    unbuilt = sorted(set(args.qa_rows) - {*names, *(["bm25", "warm"] if "ict" in names else [])})
    if unbuilt:
        parser.error(f"--qa-rows {' '.join(unbuilt)} need(s) a retriever past --through {args.through}")
    own_train = {}
    for item in args.train_sets:
        set_name, _, path = item.partition("=")
        own_train[set_name] = path
        if set_name not in EVAL_SETS or set_name == "nq" or not Path(path).is_file():
            parser.error(f"--train-sets {item}: SET is one of {sorted(set(EVAL_SETS) - {'nq'})}, FILE an existing "
                         "file (NQ's training questions are the pipeline's qa.train)")
    init_logging()
    try:
        result, timing = measure(args, names, own_train)
    except BenchError as err:  # note: e.g. a hand-edited predictions file, named FILE:LINE; nothing is overwritten
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(format_table(result))
    if args.train_sets:
        print("EM of", ", ".join(args.train_sets), "from QA rows fine-tuned on those files; the other sets' from NQ's")
    print(paired(result))
    print("answerable questions:", {k: v for k, v in next(iter(result["runs"].values()))["answerable"].items()},
          f"of {args.questions} each; seconds: {timing}")  # fmt: skip
    serial = {**result, "runs": {f"{i}/seed{s}": r for (i, s), r in result["runs"].items()}, "seconds": timing}
    write_json(args.json, serial)
    return 0


if __name__ == "__main__":
    sys.exit(main())
