"""Cloze endpoints read by a pre-trained run, shared by the real-text and FEVER studies: the knowledge corpus from
``--blocks`` or ``--corpus``, and each cloze file's span accuracy with retrieval and closed book, gold recall and
per-item outcomes (what the stage's McNemar tests read)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from benchmarks.harness import minilm_path
from realm.data.blocks import build_blocks_from_config, load_blocks
from realm.data.corpus import CorpusConfig
from realm.index.mips import BruteForceIndex
from realm.models.pretrained import model_tokenizer
from realm.pretrain.data import prepared_sentences
from realm.pretrain.heldout_eval import embed_corpus, gold_block_ids, gold_hits, heldout_outcomes
from realm.pretrain.saved_run import LoadedRun, load_run


def add_corpus_arguments(parser: argparse.ArgumentParser) -> None:
    """``--blocks`` or ``--corpus`` (with ``--tokenizer`` and ``--max-block-length``): the knowledge corpus."""
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--blocks", help="a saved blocks folder (e.g. a run's blocks/)")
    where.add_argument("--corpus", help="a json_object corpus of lead sections (the Vital summaries' format)")
    parser.add_argument("--tokenizer", default=None, help="cuts --corpus into blocks (default: all-MiniLM-L6-v2's)")
    parser.add_argument("--max-block-length", type=int, default=128)


def corpus_blocks(args: argparse.Namespace, out: Path):
    """The blocks ``--blocks`` names, or ``--corpus`` cut into blocks under ``out/blocks``."""
    if args.blocks:
        return load_blocks(args.blocks)
    tokenizer = model_tokenizer(args.tokenizer or str(minilm_path()))
    corpus = CorpusConfig(path=args.corpus, format="json_object", text_field="extract",
                          max_block_length=args.max_block_length)  # fmt: skip
    return load_blocks(build_blocks_from_config(corpus, tokenizer, out / "blocks"))


def evaluate_cloze(run_dir: Path, files: dict[str, Path], checkpoint: str | None = None) -> dict[str, dict]:
    """Each cloze file read by the run's newest model (or ``checkpoint``'s): ``evaluate_loaded``."""
    return evaluate_loaded(load_run(run_dir, checkpoint), files)


def evaluate_loaded(run: LoadedRun, files: dict[str, Path]) -> dict[str, dict]:
    """Each cloze file read by ``run``'s model (on its device): ``items``, span accuracy with retrieval and closed
    book, gold recall at 1 and k (when every item names its gold article in ``entity``) and the per-item outcomes."""
    cfg, run_dir = run.cfg, run.run_dir
    index = BruteForceIndex(embed_corpus(run.model.retriever.doc_embedder, run.store.blocks, run.special,
                                         cfg.retriever.max_block_length))  # fmt: skip
    table = {}
    for name, path in files.items():
        rows = prepared_sentences(str(path), run.tokenizer, None, cfg.retriever.max_query_length, run_dir / "data")
        # note: an answer cut by the query length leaves no mask; the collator would drop the row and misalign titles
        kept = [i for i, (start, _) in enumerate(rows["gold_span"]) if start >= 0]
        rows = rows.select(kept)
        out = heldout_outcomes(run.model, rows, run.store, run.special, cfg.retriever, index=index,
                               batch_size=cfg.eval.batch_size)  # fmt: skip
        entities = _field(path, "entity", kept)
        row = {"items": len(kept), "span_accuracy": float(out.span_correct.mean()) if kept else None,
               "closed_book_span_accuracy": float(out.closed_book_span_correct.mean()) if kept else None,
               "k": cfg.retriever.num_retrieved, "span_correct": out.span_correct.astype(int).tolist(),
               "closed_book_span_correct": out.closed_book_span_correct.astype(int).tolist()}  # fmt: skip
        if kept and all(entities):
            first, anywhere = gold_hits(out.retrieved, gold_block_ids(run.store, entities))
            row |= {"gold_recall_at_1": float(np.mean(first)), "gold_recall_at_k": float(np.mean(anywhere))}
        table[name] = row
    return {"run": str(run_dir), "step": run.step, "sets": table}


def _field(path: Path, field: str, rows: list[int]) -> list[str]:
    """``field`` of the listed rows of a jsonl file ("" where absent)."""
    values = [json.loads(line).get(field) or "" for line in path.read_text(encoding="utf-8").splitlines() if line]
    return [values[i] for i in rows]


def print_evaluation(result: dict) -> None:
    print(f"{result['run']} (step {result['step']})")
    print("| set | items | with retrieval | closed book | gold recall@1 | gold recall@k |")
    print("|---|---|---|---|---|---|")
    for name, row in result["sets"].items():
        cells = [row.get(k) for k in ("span_accuracy", "closed_book_span_accuracy", "gold_recall_at_1",
                                      "gold_recall_at_k")]  # fmt: skip
        print(f"| {name} | {row['items']} | " + " | ".join("-" if c is None else f"{c:.3f}" for c in cells) + " |")
