"""Held-out masked-fact evaluation: with retrieval, closed book (null document only), and gold-article recall.

A held-out sentence has its gold fact span masked; the model must fill it in. ``span_accuracy`` counts a sentence
as correct only when every masked wordpiece is predicted exactly; ``token_accuracy`` is the per-wordpiece rate.
A sentence cut from the corpus (one with a ``source_uid``) never reads a block of its own article, whatever
pre-training's ``retriever.exclude_source``: the article's other blocks state its other facts, often this one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import datasets
import numpy as np
import torch

from realm.core.errors import DataFileError
from realm.core.logging import progress
from realm.data.block_store import BlockStore, uid_hash
from realm.data.jsonl import iter_field
from realm.data.packing import SpecialIds
from realm.index.bm25 import BM25Index
from realm.index.embedding import embed_blocks
from realm.index.mips import DocumentIndex
from realm.index.streamed import PrecomputedSearch, streamed_search
from realm.models.retriever import Embedder, RetrieverConfig
from realm.pretrain.batch import PretrainCollator, RealmBatch
from realm.pretrain.candidates import retrieve, search_request
from realm.pretrain.eval_search import embedded_chunks
from realm.pretrain.model import RealmModel


@dataclass
class HeldoutMetrics:
    num_examples: int
    span_accuracy: float
    token_accuracy: float
    closed_book_span_accuracy: float
    closed_book_token_accuracy: float
    gold_recall_at_1: float | None
    gold_recall_at_k: float | None
    k: int

    def as_dict(self, prefix: str = "eval/") -> dict[str, float]:
        return {f"{prefix}{k}": v for k, v in vars(self).items() if v is not None}


def heldout_batches(
    rows: datasets.Dataset, special: SpecialIds, max_query_length: int, batch_size: int
) -> Iterator[RealmBatch]:
    """Held-out rows in file order with their gold span masked."""
    collator = PretrainCollator(special, max_query_length, "gold", seed=0)
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        examples = [
            {"input_ids": ids, "gold_span": gold, "idx": start + i, "source_uid_hash": uid_hash(src or "")}
            for i, (ids, gold, src) in enumerate(
                zip(chunk["input_ids"], chunk["gold_span"], chunk.get("source_uid", [""] * len(chunk["input_ids"])))
            )
        ]
        yield collator(examples)


def embed_corpus(
    embedder: Embedder, blocks: datasets.Dataset, special: SpecialIds, max_block_length: int, batch_size: int = 128
) -> torch.Tensor:
    """[N, D] embeddings of every block, in-process (evaluation and inspection; the builder does it at scale)."""
    out = np.empty((len(blocks), embedder.projection.out_features), dtype=np.float32)
    embed_blocks(embedder, blocks, special, max_block_length, batch_size, out)
    return torch.from_numpy(out)


def gold_block_ids(store: BlockStore, titles: Sequence[str], chunk_rows: int = 1 << 16) -> list[set[int]]:
    """For each gold title, the ids of the blocks that carry that title (its article). The title column is read
    ``chunk_rows`` at a time and only the wanted titles are kept (21M titles as Python strings would take GBs)."""
    wanted = set(titles)
    by_title: dict[str, set[int]] = {}
    column = store.blocks.select_columns(["title"]).with_format("arrow")
    for start, table in zip(range(0, len(store.blocks), chunk_rows), column.iter(batch_size=chunk_rows)):
        for offset, title in enumerate(table.column(0).to_pylist()):
            if title in wanted:
                by_title.setdefault(title, set()).add(start + offset)
    return [by_title.get(t, set()) for t in titles]


def gold_hits(retrieved: np.ndarray, gold: Sequence[set[int]]) -> tuple[np.ndarray, np.ndarray]:
    """([N] the row's gold article is the first retrieved block, [N] it is among them) for [N, k] retrieved ids and
    each row's gold block ids (``gold_block_ids``)."""
    first = np.array([len(row) > 0 and row[0] in ids for row, ids in zip(retrieved, gold)], dtype=bool)
    anywhere = np.array([any(b in ids for b in row) for row, ids in zip(retrieved, gold)], dtype=bool)
    return first, anywhere


def _correct(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(per-row whole span right [B], wordpieces right) for [B, M] predictions."""
    return ((pred == target) | ~mask).all(dim=1), ((pred == target) & mask).sum().item()


@dataclass
class HeldoutOutcomes:
    """What the model predicted for each held-out row, in row order."""

    span_correct: np.ndarray
    """[N] bool: every masked wordpiece predicted exactly, reading the retrieved blocks."""
    closed_book_span_correct: np.ndarray
    """[N] bool: the same from the null document alone."""
    retrieved: np.ndarray
    """[N, k] the retrieved block ids (the null document left out)."""
    tokens_correct: int
    closed_book_tokens_correct: int
    num_tokens: int


@torch.inference_mode()
def heldout_outcomes(
    model: RealmModel,
    rows: datasets.Dataset,
    store: BlockStore,
    special: SpecialIds,
    cfg: RetrieverConfig,
    *,
    index: DocumentIndex | None = None,
    batch_size: int = 32,
    query_vectors: Callable[[RealmBatch], torch.Tensor] | None = None,
    chunk_blocks: int = 65_536,
) -> HeldoutOutcomes:
    """Runs ``model`` on held-out rows (prepared sentences with ``gold_span``) and keeps each row's outcome.

    Without ``index`` the corpus is embedded with the model's current document embedder and searched exactly, so
    the figures measure the model itself rather than a stale index: ``chunk_blocks`` blocks at a time, each query
    keeping its running top-k (``exact_search``), never the [N, D] embeddings at once. ``query_vectors`` searches
    ``index`` with other vectors than the model's query embeddings (e.g. ``BM25Index``'s of each masked query):
    another retriever's top-k, read by this model (which still weighs the candidates by its own p(z|x)).
    """
    cfg = dataclasses.replace(cfg, exclude_source="article")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    if index is None:
        index = exact_search(model, rows, store, special, cfg, batch_size, query_vectors, chunk_blocks)
    span, closed_book, retrieved = [], [], []
    tok_ok = cb_tok_ok = num_tokens = 0
    bar = progress(len(rows), "evaluating", unit="query")
    for batch in heldout_batches(rows, special, cfg.max_query_length, batch_size):
        bar.update(batch.size)
        batch = batch.to(device)
        queries = query_vectors(batch) if query_vectors is not None else model.embed_queries(batch)
        batch = retrieve(queries, batch, index, store, special, cfg).to(device)
        out = model(batch)
        mask = batch.target_mask.bool()
        span_ok, tok = _correct(out.predictions, batch.target_ids, mask)
        cb_span_ok, cb_tok = _correct(out.closed_book_predictions, batch.target_ids, mask)
        # note: heldout_batches keeps file order, so row i of the outcomes is row i of ``rows``
        span.append(span_ok.cpu().numpy())
        closed_book.append(cb_span_ok.cpu().numpy())
        retrieved.append(batch.candidates.block_ids[:, 1:].cpu().numpy())
        tok_ok, cb_tok_ok, num_tokens = tok_ok + tok, cb_tok_ok + cb_tok, num_tokens + mask.sum().item()
    bar.close()
    model.train(was_training)
    k = cfg.num_retrieved
    return HeldoutOutcomes(
        span_correct=np.concatenate(span) if span else np.zeros(0, dtype=bool),
        closed_book_span_correct=np.concatenate(closed_book) if closed_book else np.zeros(0, dtype=bool),
        retrieved=np.concatenate(retrieved) if retrieved else np.zeros((0, k), dtype=np.int64),
        tokens_correct=tok_ok,
        closed_book_tokens_correct=cb_tok_ok,
        num_tokens=num_tokens,
    )


def exact_search(
    model: RealmModel,
    rows: datasets.Dataset,
    store: BlockStore,
    special: SpecialIds,
    cfg: RetrieverConfig,
    batch_size: int,
    query_vectors: Callable[[RealmBatch], torch.Tensor] | None,
    chunk_blocks: int,
) -> PrecomputedSearch:
    """Exact top-k of every held-out batch's queries (as ``retrieve`` will ask for them, batch by batch) over the
    blocks embedded now by ``model``'s document tower, streamed in chunks of ``chunk_blocks``; replayed to
    ``heldout_outcomes``' batches in order. Memory: queries x depth plus one chunk's embeddings and scores."""
    device = next(model.parameters()).device
    queries, depth = [], 0
    for batch in heldout_batches(rows, special, cfg.max_query_length, batch_size):
        batch = batch.to(device)
        vectors, depth = search_request(query_vectors(batch) if query_vectors else model.embed_queries(batch), cfg)
        queries.append(vectors)
    if not queries:
        return PrecomputedSearch(torch.zeros(0, 0), torch.zeros(0, 0, dtype=torch.int64), len(store))
    chunks = embedded_chunks(model.retriever.doc_embedder, store.blocks, special, cfg.max_block_length, chunk_blocks)
    scores, ids = streamed_search(torch.cat(queries), chunks, depth)
    return PrecomputedSearch(scores, ids, len(store))


def evaluate_heldout(
    model: RealmModel,
    rows: datasets.Dataset,
    store: BlockStore,
    special: SpecialIds,
    cfg: RetrieverConfig,
    *,
    index: DocumentIndex | None = None,
    batch_size: int = 32,
    max_examples: int | None = None,
    gold_titles: Sequence[str] | None = None,
    query_vectors: Callable[[RealmBatch], torch.Tensor] | None = None,
    chunk_blocks: int = 65_536,
) -> HeldoutMetrics:
    """Evaluates ``model`` on held-out rows (``heldout_outcomes``, which says what ``index`` and ``query_vectors``
    do), on the first ``max_examples``; with ``gold_titles`` also the share of rows whose gold article is retrieved
    first and among the top k."""
    if max_examples is not None:
        rows = rows.select(range(min(max_examples, len(rows))))
        gold_titles = list(gold_titles)[: len(rows)] if gold_titles is not None else None
    out = heldout_outcomes(
        model, rows, store, special, cfg, index=index, batch_size=batch_size, query_vectors=query_vectors,
        chunk_blocks=chunk_blocks,
    )
    num = len(out.span_correct)
    hit1 = hitk = 0
    if gold_titles is not None:
        first, anywhere = gold_hits(out.retrieved, gold_block_ids(store, gold_titles))
        hit1, hitk = int(first.sum()), int(anywhere.sum())
    num_tokens = max(out.num_tokens, 1)
    return HeldoutMetrics(
        num_examples=num,
        span_accuracy=out.span_correct.sum().item() / max(num, 1),
        token_accuracy=out.tokens_correct / num_tokens,
        closed_book_span_accuracy=out.closed_book_span_correct.sum().item() / max(num, 1),
        closed_book_token_accuracy=out.closed_book_tokens_correct / num_tokens,
        gold_recall_at_1=hit1 / max(num, 1) if gold_titles is not None else None,
        gold_recall_at_k=hitk / max(num, 1) if gold_titles is not None else None,
        k=cfg.num_retrieved,
    )


def bm25_retrieval(
    store: BlockStore, special: SpecialIds, vocab_size: int, unk_id: int | None
) -> tuple[BM25Index, Callable[[RealmBatch], torch.Tensor]]:
    """BM25 over every block's title and body wordpieces, and the BM25 vectors of a batch's masked queries: the
    ``index`` and ``query_vectors`` with which ``evaluate_heldout`` measures a model reading BM25's top-k (the
    lexical baseline of its own retriever). Special tokens are not terms; [MASK] hides the answer from BM25 too."""
    titles, bodies = store.tokens(range(len(store)))
    ignore = {special.cls, special.sep, special.pad, special.mask} | ({unk_id} if unk_id is not None else set())
    bm25 = BM25Index([title + body for title, body in zip(titles, bodies)], vocab_size, ignore=ignore)
    return bm25, lambda batch: bm25.query_vectors(batch.query_tokens())


def gold_titles(path: str, field: str = "entity") -> list[str] | None:
    """The gold article title of each held-out sentence (the ``entity`` field of the world's jsonl), if present."""
    try:
        return list(iter_field(path, field))
    except DataFileError:
        return None
