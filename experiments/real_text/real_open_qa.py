"""REALM's comparisons on real text: one corpus (the Wikipedia Vital lead sections), every row through the project's
own pipeline and commands, the same reader budget for every QA row.

    python -m experiments.real_text.real_open_qa [--work runs/real_open_qa] [--seeds 0 1] [--inits scratch minilm]
                                 [--questions 500] [--qa-rows bm25 start ict realm warm] [--json PATH]
                                 [--set key=value ...] [--gpu] [--through start|ict|realm] [--train-sets SET=FILE]
                                 [--finetune-seeds N]

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
closed-book column of the held-out cloze is REALM's own closed-book comparison.
``experiments/demo/evidence_runs.py``-style paired differences (realm - ict and realm - warm, every set, top-20 and EM
over answerable questions) with standard errors over seeds close the table, then per seed the answerable questions only
one of the two QA rows gets right, with the exact McNemar p. Resumable: a finished stage is not rerun, a QA row is
fine-tuned once, and its predictions on each set are read back (``qa_ROW/eval/SET_N/predictions.jsonl`` for N questions,
as ``realm evaluate --name SET_N`` writes them), so another ``--questions`` only evaluates the sets it changes.
``--through start`` (or ``ict``) runs the pipeline only as far as that retriever needs (MiniLM as it is needs only the
blocks in its vocabulary; the scratch start needs the warm start) and gives the rows up to it: the cheap first look at
an init on a machine where its pre-training is too slow. Every QA row is fine-tuned on NQ (the pipeline's ``qa.train``);
``--train-sets wq=FILE ct=FILE`` also fine-tunes each row on those sets' own training questions (``qa_ROW_SETtrain``)
and takes their EM from there, as the paper does. One fine-tuning of 150 steps is noisy: ``--finetune-seeds N``
fine-tunes every QA row N times from the same start over the same frozen index, only ``train.seed`` changed
(``qa_ROW_ftR``, ``qa_ROW_SETtrain_ftR``), reports their mean EM, and prints how far a row's fine-tuning seeds lie apart
(``real_open_qa_report.replica_spread``): the noise a difference between two rows must stand above. The table, its rows
and the paired differences are ``real_open_qa_report.py``'s.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time
from pathlib import Path

from benchmarks.harness import REPO, BenchError, minilm_path, write_json  # noqa: E402 isort:skip  (first)

import torch  # noqa: E402
from experiments.real_text.qa_pairs import load_predictions  # noqa: E402
from experiments.real_text.real_open_qa_report import (  # noqa: E402; fmt: skip
    DENSE,
    EVAL_SETS,
    QA_ROWS,
    format_table,
    mean_of_replicas,
    paired,
    replica_spread,
)
from experiments.common.retrieval_accuracy import (  # noqa: E402; fmt: skip
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
from realm.pipeline import layout  # noqa: E402
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

CONFIGS = {"scratch": REPO / "configs/real_text/default.yaml", "minilm": REPO / "configs/real_text/minilm.yaml"}
FULL_LENGTHS = ["--warm_start.warmup_steps=null", "--warm_start.ict_steps=null", "--pretrain_steps=null",
                "--qa_steps=null"]
"""Every stage at its own config's length (null), where ``realm real-text``'s default cuts them to fit 30 minutes."""
GPU_CONFIG = REPO / "configs/real_text/gpu.yaml"
"""``--gpu`` takes this config's ``pretrain_overrides`` (the builder on the trainer's GPU, candidates prefetched)."""
REPLICA_SEED_STEP = 100
"""A QA row's fine-tuning seed r (``--finetune-seeds``) trains with ``train.seed`` = the pipeline's seed + 100 r, in
``qa_ROW_ftR`` beside ``qa_ROW``: for pipeline seeds below 100, no fine-tuning seed of one is another's."""


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
        data = {"data": {"tokenizer": cfg.init_from or str(layout.tokenizer_dir(out)),
                         "blocks": str(layout.blocks_dir(out))}}  # fmt: skip
        pretrain = load_config(PretrainConfig, cfg.pretrain_config,
                               merge_sections(dict(cfg.pretrain_overrides), data, "bench"))  # fmt: skip
    return pretrain, cfg.init_from or str(layout.warmup_encoder(out))


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
            "ict": lambda: Retriever.from_pretrained(layout.ict_retriever(out)),
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


def qa_rows(cfg: RealTextConfig, sets: dict, names: list[str], own_train: dict | None = None,
            finetune_seeds: int = 1) -> dict[str, dict]:  # fmt: skip
    """Exact match of QA fine-tuned from each dense start, and from ICT's with BM25's candidates (``bm25``), on every
    set (all / answerable questions; ``mean_of_replicas`` over ``finetune_seeds`` fine-tunings of each). A set in
    ``own_train`` (``{set: training file}``) is read by the same start fine-tuned on that file instead, in
    ``qa_ROW_SETtrain``, as the paper fine-tunes on each set."""
    own_train = own_train or {}
    out = Path(cfg.out)
    pretrain, bert = retriever_shape(cfg)
    data = {"tokenizer": pretrain.data.tokenizer, "blocks": pretrain.data.blocks}
    starts = {
        "start": {"init": {"bert": bert}, "data": data},
        "ict": {"init": {"bert": bert, "retriever": str(layout.ict_retriever(out))}, "data": data},
        "realm": {"init": {"run": str(out)}},
    }
    # note: ORQA's start with the blocks BM25 proposes, so bm25 - ict is the retriever's share of the QA row
    starts["bm25"] = {**starts["ict"], "retrieval": {"candidates": "bm25"}}
    # note: REALM's own start (warmed-up reader, ICT retriever), so realm - warm is the pre-training's share; for the
    # scratch init the warm-up's encoder is already the start's, and warm is ict again
    starts["warm"] = {**starts["ict"], "init": {**starts["ict"]["init"], "bert": str(layout.warmup_encoder(out))}}
    # note: every start embeds and pools as the pre-training run did, so the rows differ only in their weights
    retriever = {key: getattr(pretrain.retriever, key) for key in RETRIEVER_SHAPE}
    rows = {}

    def frozen_index(qa_dir: Path, start: dict) -> str:
        index = start.get("init", {}).get("index") or live_index.current_index_version(qa_dir)
        if index is None:
            raise BenchError(f"{qa_dir / 'index'}: no published index, the frozen index this row's other "
                             "fine-tunings (another set's training questions, another fine-tuning seed) read")
        return str(index)

    def fine_tune(qa_dir: Path, start: dict, sets: dict) -> dict[str, dict]:
        # note: fine-tuning seed r > 0 starts as seed 0 did, over seed 0's frozen index (the same retriever, so not
        # embedded again); only train.seed differs. Each folder is fine-tuned once.
        folders = [qa_dir] + [qa_dir.with_name(f"{qa_dir.name}_ft{r}") for r in range(1, finetune_seeds)]
        for r, folder in enumerate(folders):
            if publication.read_manifest(folder / MODEL_DIR) is not None:
                continue
            index = {"index": frozen_index(qa_dir, start)} if r else {}
            sections = {**start, "init": {**start.get("init", {}), **index}}
            config = finetune_config(cfg, folder, {"retriever": retriever, **sections})
            seed = cfg.seed + REPLICA_SEED_STEP * r
            finetune_and_evaluate(dataclasses.replace(config, train=dataclasses.replace(config.train, seed=seed)))
        return mean_of_replicas([exact_match(folder, sets) for folder in folders])

    for name, sections in ((name, starts[name]) for name in names):
        qa_dir = out / f"qa_{name}"
        rows[name] = fine_tune(qa_dir, sections, {s: questions for s, questions in sets.items() if s not in own_train})
        for set_name, path in own_train.items():
            # note: the same start and frozen index (the row's own, so not embedded again); no dev set, since the
            # set itself is evaluated next; a malformed training record (a bad regex) is skipped and counted
            init = {**sections.get("init", {}), "index": frozen_index(qa_dir, {})}
            task = {"name": EVAL_SETS[set_name][0], "train": path, "dev": "", "dev_name": "", "skip_malformed": True}
            own = {**sections, "init": init, "task": task}
            rows[name] |= fine_tune(out / f"qa_{name}_{set_name}train", own, {set_name: sets[set_name]})
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


def done(cfg: RealTextConfig, summary: dict, stage: str) -> bool:
    """Whether ``cfg``'s run already holds what ``stage`` makes: a summary with the held-out figures for pre-training,
    the ICT retriever for the warm start, any summary for the data stage (which writes one after the blocks)."""
    out = Path(cfg.out)
    if stage == "pretrain":
        return "heldout_accuracy_retrieval" in summary
    return layout.ict_retriever(out).is_dir() if stage == "warm_start" else bool(summary)


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
            texts = block_texts(layout.blocks_dir(cfg.out))
            answer_sets = {n: (qs, answerable(qs, texts)) for n, qs in sets.items()}
            cloze = {"ict": (summary["heldout_accuracy_retrieval_start"],
                             summary["heldout_accuracy_closed_book_start"]),
                     "realm": (summary["heldout_accuracy_retrieval"], summary["heldout_accuracy_closed_book"])
                     } if "heldout_accuracy_retrieval" in summary else {}  # fmt: skip
            run = {"summary": summary, "answerable": {n: sum(a) for n, (_, a) in answer_sets.items()}, "cloze": cloze,
                   "retrieval": retrieval_rows(cfg, names, answer_sets, texts, bm25)}  # fmt: skip
            if args.qa_rows:
                run["qa"] = qa_rows(cfg, answer_sets, args.qa_rows, own_train, args.finetune_seeds)
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
    parser.add_argument("--finetune-seeds", type=int, default=1, metavar="N",
                        help="fine-tune each QA row N times, only train.seed changed (qa_ROW_ftR for R < N): EM is "
                             "their mean, and how far they lie apart is printed beside the paired differences")
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
    if args.finetune_seeds < 1:
        parser.error(f"--finetune-seeds {args.finetune_seeds}: at least 1")
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
    if args.finetune_seeds > 1:
        print(f"EM above: the mean of each QA row's {args.finetune_seeds} fine-tuning seeds (train.seed = seed + "
              f"{REPLICA_SEED_STEP} r); how far they lie apart:\n{replica_spread(result)}")
    print("answerable questions:", {k: v for k, v in next(iter(result["runs"].values()))["answerable"].items()},
          f"of {args.questions} each; seconds: {timing}")  # fmt: skip
    serial = {**result, "runs": {f"{i}/seed{s}": r for (i, s), r in result["runs"].items()}, "seconds": timing}
    write_json(args.json, serial)
    return 0


if __name__ == "__main__":
    sys.exit(main())
