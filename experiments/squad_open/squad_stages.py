"""``experiments/squad_open/squad_open.py``'s stages: BM25, each encoder's dense retriever as is / after ``realm ict`` /
after ``realm train``, and ``realm finetune`` + ``realm evaluate``; each ``realm`` command runs as its own process
(``harness.run_realm``), logging to ``WORK/logs/STAGE.log``."""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from benchmarks.harness import REPO, StageClock, minilm_path, run_realm
from experiments.common.retrieval_accuracy import KS
from experiments.squad_open.squad_data import Encoded, Squad, make_blocks, write_qa_split
from experiments.squad_open.squad_retrieval import (
    dense_embeddings, rank_paragraphs, realm_retriever, retrieval_row, squad_bm25_rankings,
)

from realm.core.config import load_config
from realm.data.blocks import load_blocks
from realm.data.vocab import load_tokenizer, train_wordpiece
from realm.models.pretrained import model_tokenizer, read_bert_config
from realm.models.retriever import Retriever, RetrieverConfig
from realm.pretrain.config import PretrainConfig
from realm.warmstart.ict_train import ICTConfig

CONFIGS = Path(__file__).parent / "configs"
"""The study's own configs (they moved here from ``configs/squad_open/``), found beside this module."""


@dataclass
class Bench:
    """One run: its options and data, and what it has measured so far (table rows, stage seconds, commands,
    settings, notes, QA figures: all go into the JSON)."""

    args: argparse.Namespace
    squad: Squad
    work: Path
    clock: StageClock
    known: dict[tuple[int, int], bool] = field(default_factory=dict)
    """``has_answer`` of (question, paragraph) pairs, shared by all retrievers (their rankings overlap a lot)."""
    rows: list[dict] = field(default_factory=list)
    commands: dict[str, str] = field(default_factory=dict)
    settings: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    qa: list[dict] = field(default_factory=list)

    def run(self, name: str, argv: Sequence[str]) -> None:
        """Runs ``realm ARGV`` as stage ``name``, logging to ``WORK/logs/NAME.log``."""
        self.commands[name] = shlex.join(["realm", *argv])
        with self.clock(name):
            run_realm(argv, self.work / "logs" / f"{name}.log")

    def add_row(self, label: str, rankings: list[list[int]], seconds: float) -> None:
        self.rows.append(retrieval_row(label, rankings, self.squad, self.known, seconds))


@dataclass(frozen=True)
class Encoder:
    """One encoder's ICT and REALM stages: ``experiments/squad_open/configs/{ict,pretrain}/NAME.yaml`` with
    ``overrides`` (its shape, or the folder it starts from) and the step counts the command line gives (None: the
    configs')."""

    name: str
    label: str
    overrides: list[str]
    ict_steps: int | None
    realm_steps: int | None

    @property
    def ict_file(self) -> Path:
        return CONFIGS / "ict" / f"{self.name}.yaml"

    @property
    def pretrain_file(self) -> Path:
        return CONFIGS / "pretrain" / f"{self.name}.yaml"

    def ict_config(self) -> ICTConfig:
        return load_config(ICTConfig, self.ict_file, [*self.overrides, *max_steps(self.ict_steps)])


def max_steps(steps: int | None) -> list[str]:
    return [f"--train.max_steps={steps}"] if steps else []


def evaluate_dense(bench: Bench, name: str, label: str, retriever: Retriever, data: Encoded, cfg: RetrieverConfig,
                   *, cosine_label: str | None = None) -> None:  # fmt: skip
    """Adds the retriever's row (and, with ``cosine_label``, a row for the same embeddings L2-normalised)."""
    with bench.clock(f"eval_{name}"):
        start = time.perf_counter()
        blocks = load_blocks(data.blocks)
        paragraph_of_id = {p["id"]: i for i, p in enumerate(bench.squad.paragraphs)}
        paragraph_of_block = np.array([paragraph_of_id[d] for d in blocks["doc_id"]])
        docs, queries = dense_embeddings(retriever, data.tokenizer, blocks, cfg, bench.squad)
        bench.add_row(label, rank_paragraphs(docs, queries, paragraph_of_block, max(KS)), time.perf_counter() - start)
        if cosine_label:
            start = time.perf_counter()
            normalise = torch.nn.functional.normalize
            rankings = rank_paragraphs(normalise(docs, dim=-1), normalise(queries, dim=-1), paragraph_of_block, max(KS))
            bench.add_row(cosine_label, rankings, time.perf_counter() - start)


def stage_bm25(bench: Bench) -> None:
    with bench.clock("bm25"):
        start = time.perf_counter()
        rankings, settings = squad_bm25_rankings(bench.squad, max(KS))
        bench.settings["bm25"] = settings
        bench.add_row("BM25 (bm25s)", rankings, time.perf_counter() - start)


def ict_and_realm(bench: Bench, encoder: Encoder, ict_cfg: ICTConfig, data: Encoded, work: Path) -> Path:
    """``realm ict`` into ``work/ict``, then ``realm train`` (REALM, with the index builder as a child process) into
    ``work/realm`` from its retriever, each evaluated; returns the REALM run directory."""
    a = bench.args
    shared = [f"--data.tokenizer={data.tokenizer_path}", f"--data.blocks={data.blocks}", f"--train.seed={a.seed}",
              f"--train.num_threads={a.threads}", *encoder.overrides]  # fmt: skip
    ict_args = [f"--train.run_dir={work / 'ict'}", *shared, *max_steps(encoder.ict_steps)]
    bench.run(f"{encoder.name}_ict", ["ict", f"--config={encoder.ict_file}", *ict_args])
    label = f"{encoder.label} after ICT ({ict_cfg.train.max_steps} steps)"
    retriever = Retriever.from_pretrained(work / "ict" / "retriever")
    evaluate_dense(bench, f"{encoder.name}_ict", label, retriever, data, ict_cfg.retriever)

    run_dir = work / "realm"
    overrides = [f"--train.run_dir={run_dir}", f"--train.init_retriever={work / 'ict' / 'retriever'}",
                 f"--data.sentences={data.sentences}", *shared, *max_steps(encoder.realm_steps)]  # fmt: skip
    cfg = load_config(PretrainConfig, encoder.pretrain_file, overrides)
    bench.run(f"{encoder.name}_realm", ["train", f"--config={encoder.pretrain_file}", *overrides])
    label = f"{encoder.label} after ICT + REALM ({cfg.train.max_steps} steps)"
    retriever = realm_retriever(cfg, run_dir, len(data.tokenizer))
    evaluate_dense(bench, f"{encoder.name}_realm", label, retriever, data, cfg.retriever)
    return run_dir


def stage_tiny(bench: Bench) -> Path:
    """Vocabulary, blocks, ICT and REALM of a tiny BERT built from the config; returns the REALM run directory."""
    a, work = bench.args, bench.work / "tiny"
    shutil.rmtree(work, ignore_errors=True)
    shape = [f"--model.hidden_size={a.tiny_hidden}", f"--model.num_layers={a.tiny_layers}",
             f"--retriever.max_block_length={a.tiny_block_length}"]  # fmt: skip
    encoder = Encoder("tiny", "tiny BERT", shape, a.tiny_ict_steps, a.tiny_realm_steps)
    ict_cfg = encoder.ict_config()
    with bench.clock("tiny_data"):
        tokenizer = train_wordpiece(bench.squad.texts, a.vocab_size, work / "tokenizer")
        data = make_blocks(bench.squad, tokenizer, work / "tokenizer", ict_cfg.retriever.max_block_length, work)
    return ict_and_realm(bench, encoder, ict_cfg, data, work)


def minilm_start(cfg: RetrieverConfig, out: Path) -> Path:
    """all-MiniLM-L6-v2 saved as a retriever embedder (with its tokenizer), the ``model.init_from`` of its stages.

    With ``embed_dim`` equal to its width (384) the projection starts as the identity (``retriever.init_projection``),
    so the embedding starts as the model's own mean-pooled sentence vector; otherwise it starts random.
    """
    source = minilm_path()
    init = "identity" if cfg.embed_dim == read_bert_config(source).hidden_size else "random"
    embedder = Retriever.from_bert(str(source), replace(cfg, init_projection=init)).query_embedder
    embedder.save_pretrained(out)
    model_tokenizer(source).save_pretrained(out)
    return out


def stage_minilm(bench: Bench) -> Path | None:
    """MiniLM as is, then (unless skipped) after ICT and after REALM; returns the REALM run directory, if any."""
    a, work = bench.args, bench.work / "minilm"
    shutil.rmtree(work, ignore_errors=True)
    shape = [f"--retriever.max_block_length={a.minilm_block_length}"]
    ict_cfg = Encoder("minilm", "MiniLM", shape, a.minilm_ict_steps, None).ict_config()
    with bench.clock("minilm_data"):
        start = minilm_start(ict_cfg.retriever, work / "start")
        data = make_blocks(bench.squad, load_tokenizer(start), start, ict_cfg.retriever.max_block_length, work)
    as_is = Retriever.from_bert(str(start), ict_cfg.retriever)
    label, cosine = "MiniLM as is (inner product)", "MiniLM as is (cosine: its own similarity, same embeddings)"
    evaluate_dense(bench, "minilm", label, as_is, data, ict_cfg.retriever, cosine_label=cosine)
    if "minilm-train" in a.skip:
        return None
    encoder = Encoder("minilm", "MiniLM", [*shape, f"--model.init_from={start}"], a.minilm_ict_steps,
                      a.minilm_realm_steps)  # fmt: skip
    return ict_and_realm(bench, encoder, ict_cfg, data, work)


def stage_finetune(bench: Bench, runs: dict[str, Path]) -> None:
    """``realm finetune`` on two thirds of the articles' questions from a REALM run, ``realm evaluate`` on the rest."""
    a = bench.args
    source = a.qa_from if a.qa_from in runs else next(iter(runs), None)
    if source is None:
        bench.notes.append("no fine-tuning: neither REALM run was made")
        return
    if source != a.qa_from:
        bench.notes.append(f"fine-tuned from the {source} run: the {a.qa_from} REALM run was skipped")
    with bench.clock("qa_data"):
        split = write_qa_split(bench.squad, bench.work / "data", a.seed)
    out = bench.work / f"qa_{source}"
    shutil.rmtree(out, ignore_errors=True)
    bench.run("qa_finetune", [
        "finetune", f"--config={CONFIGS / 'finetune' / f'{source}.yaml'}", "--task.name=jsonl",
        f"--task.train={split['files']['train']}", f"--init.run={runs[source]}", f"--train.run_dir={out}",
        f"--train.seed={a.seed}", f"--train.num_threads={a.threads}", *max_steps(a.qa_steps),
    ])  # fmt: skip
    bench.run("qa_evaluate", [
        "evaluate", str(out), "--task=jsonl", f"--data={split['files']['test']}", "--name=test",
        f"--max-questions={a.qa_eval_questions}", f"--top-k={','.join(map(str, KS))}",
    ])  # fmt: skip
    metrics = json.loads((out / "eval" / "test" / "metrics.json").read_text())
    bench.qa.append({
        "source": f"{source} REALM run",
        "steps": json.loads((out / "model" / "manifest.json").read_text()).get("step"),
        "num_train_questions": split["num_train"],
        "num_train_articles": split["num_train_articles"],
        "num_test_articles": split["num_test_articles"],
        "num": min(a.qa_eval_questions or split["num_test"], split["num_test"]),
        **metrics,
    })  # fmt: skip
