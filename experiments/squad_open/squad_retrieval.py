"""``experiments/squad_open/squad_open.py``'s retrieval rows: paragraphs ranked by BM25 or by a dense retriever's
blocks, and DPR's top-k accuracy and gold-paragraph recall of a ranking (``retrieval_accuracy.hit_rows`` over the
paragraph texts)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch
from benchmarks.harness import BenchError
from experiments.common.retrieval_accuracy import KS, dense_rankings, embed_questions, hit_rows
from experiments.squad_open.squad_data import Squad
from transformers import PreTrainedTokenizerBase

from realm.data.packing import SpecialIds
from realm.index.text_bm25 import bm25_rankings, titled_texts
from realm.models.retriever import Retriever, RetrieverConfig
from realm.pretrain.config import PretrainConfig
from realm.pretrain.heldout_eval import embed_corpus
from realm.pretrain.saved_run import MODEL_FILE, load_model
from realm.qa.metrics import top_k_accuracy
from realm.run.layout import CHECKPOINT_PREFIX, checkpoints_dir
from realm.run.publication import latest_published

logger = logging.getLogger("bench.squad_open")


def retrieval_row(name: str, rankings: list[list[int]], squad: Squad, known: dict[tuple[int, int], bool],
                  seconds: float) -> dict:  # fmt: skip
    """Top-k accuracy and gold-paragraph recall of paragraph ``rankings`` (``known``: ``has_answer`` of the
    (question, paragraph) pairs already asked, shared by every retriever of the run)."""
    accuracy = top_k_accuracy(hit_rows(rankings, squad.texts, squad.questions, known=known), KS)
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
    """Paragraph numbers ranked by bm25s over ``title text`` (``realm.index.text_bm25.bm25_rankings``)."""
    docs = titled_texts([p["title"] for p in squad.paragraphs], [p["text"] for p in squad.paragraphs])
    ranked, settings = bm25_rankings(docs, [q.question for q in squad.questions], k)
    return ranked, {**settings, "text": "title text"}


def dense_embeddings(retriever: Retriever, tokenizer: PreTrainedTokenizerBase, blocks, cfg: RetrieverConfig,
                     squad: Squad) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """([N, D] block embeddings by ``realm.pretrain.heldout_eval.embed_corpus``, [Q, D] question embeddings)."""
    docs = embed_corpus(retriever.doc_embedder, blocks, SpecialIds.of(tokenizer), cfg.max_block_length)
    queries = embed_questions(retriever, tokenizer, [q.question for q in squad.questions], cfg.max_query_length)
    return docs, queries


def rank_paragraphs(docs: torch.Tensor, queries: torch.Tensor, paragraph_of_block: np.ndarray, k: int
                    ) -> list[list[int]]:  # fmt: skip
    """Paragraph numbers by exact inner-product search over the blocks; a paragraph ranks at its best block."""
    # note: searching k x (most blocks of one paragraph) blocks always yields k distinct paragraphs
    depth = k * int(np.bincount(paragraph_of_block).max())
    ranked_blocks = dense_rankings(docs, queries, depth)
    return [list(dict.fromkeys(paragraph_of_block[row].tolist()))[:k] for row in ranked_blocks]


def realm_retriever(cfg: PretrainConfig, run_dir: Path, vocab_size: int) -> Retriever:
    """The retriever of a pre-training run's newest complete checkpoint (loaded as ``realm inspect`` loads it).

    The model is built from ``cfg``, the config this script started the run with, rather than from the run's
    ``config.yaml``, so the figures never depend on re-reading a config written by another version of the code.
    """
    found = latest_published(checkpoints_dir(run_dir), CHECKPOINT_PREFIX)
    if found is None:
        raise BenchError(f"{run_dir}: no complete checkpoint")
    return load_model(cfg, vocab_size, found[1] / MODEL_FILE).retriever
