"""From query embeddings to the K candidate slots: MIPS top-k, trivial-retrieval filter, null document.

The index only *chooses* candidates; their relevance scores are recomputed with the live document embedder in the
model's forward so gradients reach it (DESIGN.md section 1).
"""

from __future__ import annotations

import functools
from contextlib import AbstractContextManager, nullcontext
from typing import Callable

import numpy as np
import torch
from torch import Tensor

from realm.data.articles import block_articles
from realm.data.block_store import BlockStore
from realm.data.packing import Ragged, SpecialIds, contains_runs, pack_blocks, pack_ragged_pairs, reader_length
from realm.index.mips import DocumentIndex, centered_queries
from realm.models.retriever import RetrieverConfig
from realm.pretrain.batch import Candidates, RealmBatch
from realm.pretrain.exploration import batch_generator, explore_candidates
from realm.pretrain.model import RealmModel


def select_candidates(
    block_ids: Tensor, source_keys: Tensor | np.ndarray, block_keys: np.ndarray, num_retrieved: int
) -> Tensor:
    """Drops trivial retrievals (the blocks whose key is the query's source key) and keeps the best ``num_retrieved``.

    Args:
        block_ids: [B, k'] retrieved ids, best first (k' > num_retrieved when over-retrieving); -1 is no result.
        source_keys: [B] key of each query's source: the hash of its source block's uid, or of that block's article
            (``exclusion_keys``); 0 is no source, and drops nothing.
        block_keys: [N] the same key of every block.

    Returns:
        [B, num_retrieved] block ids; -1 pads a row that ran out of candidates.
    """
    ids = block_ids.cpu().numpy()
    keep = kept_by_source_filter(ids, source_keys, block_keys)
    out = np.full((ids.shape[0], num_retrieved), -1, dtype=np.int64)
    for row in range(ids.shape[0]):
        chosen = ids[row][keep[row]][:num_retrieved]
        out[row, : len(chosen)] = chosen
    return torch.from_numpy(out)


def kept_by_source_filter(ids: np.ndarray, source_keys: Tensor | np.ndarray, block_keys: np.ndarray) -> np.ndarray:
    """[B, k'] bool: which of ``ids`` are real results whose key is not their query's source key
    (``select_candidates``' arguments)."""
    sources = (source_keys.cpu().numpy() if isinstance(source_keys, Tensor) else np.asarray(source_keys))[:, None]
    valid = ids >= 0
    keys = np.where(valid, block_keys[np.clip(ids, 0, None)], 0)
    return valid & ((keys != sources) | (sources == 0))


def exclusion_keys(source_uid_hashes: Tensor, store: BlockStore, exclude_source: str) -> tuple[np.ndarray, np.ndarray]:
    """([B] each query's source key, [N] each block's key) for ``select_candidates``: with ``exclude_source`` ``block``
    the uid hashes of the source block and of every block, with ``article`` those of their articles
    (``realm.data.articles``), so that every block of the source's article is dropped."""
    sources = source_uid_hashes.cpu().numpy()
    if exclude_source == "block":
        return sources, store.uid_hashes
    articles = block_articles(store)
    return articles.of_sources(sources), articles.hashes


def answer_slots(batch: RealmBatch, bodies: Ragged, num_retrieved: int) -> Tensor:
    """[B, 1 + num_retrieved] bool: which slots' ``bodies`` (flat, ``num_retrieved`` per query, no null slot) hold
    the query's masked wordpieces as one contiguous run (``contains_runs``); slot 0 (the null document) never does."""
    bsz = len(batch.target_ids)
    answers = batch.target_ragged().take(np.repeat(np.arange(bsz), num_retrieved))
    flags = contains_runs(bodies, answers).reshape(bsz, num_retrieved)
    return torch.from_numpy(np.concatenate([np.zeros((bsz, 1), dtype=bool), flags], axis=1))


def build_candidates(
    batch: RealmBatch, retrieved: Tensor, store: BlockStore, special: SpecialIds, max_block_length: int
) -> Candidates:
    """Packs the null document plus ``retrieved`` ([B, K-1] block ids) into embedder and reader inputs."""
    bsz, num_retrieved = retrieved.shape
    k = num_retrieved + 1
    flat = retrieved.reshape(-1).cpu().numpy()
    present = flat >= 0
    titles, bodies = store.ragged(flat[present])
    # note: flat wordpieces and array packing, no Python list of them (the packing is on a GPU step's critical path)
    slot_bodies = bodies.spread(present)
    docs = pack_blocks(titles.spread(present), slot_bodies, special, max_block_length)

    queries = batch.query_ragged()
    # slot 0 of every query reads the null document (an empty body)
    reads = np.concatenate([np.zeros((bsz, 1), dtype=bool), present.reshape(bsz, num_retrieved)], axis=1)
    reader = pack_ragged_pairs(
        queries.take(np.repeat(np.arange(bsz), k)),
        bodies.spread(reads.reshape(-1)),
        special,
        reader_length(queries, max_block_length),
    )
    null_ids = torch.tensor([[special.cls, special.sep, special.sep]], dtype=torch.long)
    block_ids = torch.cat([torch.full((bsz, 1), -1, dtype=torch.long), retrieved], dim=1)
    slot_mask = torch.cat([torch.ones(bsz, 1, dtype=torch.bool), retrieved >= 0], dim=1)
    return Candidates(
        block_ids=block_ids,
        slot_mask=slot_mask,
        doc_input_ids=docs["input_ids"].view(bsz, num_retrieved, -1),
        doc_attention_mask=docs["attention_mask"].view(bsz, num_retrieved, -1),
        doc_token_type_ids=docs["token_type_ids"].view(bsz, num_retrieved, -1),
        null_input_ids=null_ids,
        reader_input_ids=reader["input_ids"].view(bsz, k, -1),
        reader_attention_mask=reader["attention_mask"].view(bsz, k, -1),
        reader_token_type_ids=reader["token_type_ids"].view(bsz, k, -1),
        answer_slots=answer_slots(batch, slot_bodies, num_retrieved),
    )


def search_request(query_embeddings: Tensor, cfg: RetrieverConfig, explore: bool = False) -> tuple[Tensor, int]:
    """What ``retrieve`` searches the index with: ([B, D] float32 CPU queries, centred with ``cfg.center_queries``
    over the batch, and how many results it asks for). Held-out evaluation asks the same beforehand
    (``realm.index.streamed``)."""
    queries = query_embeddings.detach().float().cpu()
    if cfg.center_queries:
        queries = centered_queries(queries)
    exploring = explore and cfg.explore_slots > 0
    return queries, (cfg.explore_pool if exploring else cfg.num_retrieved) + cfg.num_extra_retrieved


@torch.no_grad()
def retrieve(
    query_embeddings: Tensor,
    batch: RealmBatch,
    index: DocumentIndex,
    store: BlockStore,
    special: SpecialIds,
    cfg: RetrieverConfig,
    explore: bool = False,
) -> RealmBatch:
    """Searches ``index`` with [B, D] query embeddings and returns ``batch`` with its K candidate slots attached.

    Over-retrieves ``cfg.num_extra_retrieved`` blocks so the slots stay full after the trivial-retrieval filter, which
    drops what ``cfg.exclude_source`` says: the query's source block, or every block of its article. With
    ``cfg.center_queries`` the batch's mean query is subtracted first; with ``explore`` (the trainer's search) and
    ``cfg.explore_slots``, that many slots are sampled from the best ``cfg.explore_pool`` (``realm.pretrain.exploration``).
    """
    queries, depth = search_request(query_embeddings, cfg, explore)
    scores, ids = index.search(queries, depth)
    sources, keys = exclusion_keys(batch.source_uid_hashes, store, cfg.exclude_source)
    if explore and cfg.explore_slots > 0:
        found = ids.cpu().numpy()
        chosen = explore_candidates(
            found, cfg.score_scale * np.asarray(scores.cpu()), kept_by_source_filter(found, sources, keys),
            cfg.num_retrieved, cfg.explore_slots, cfg.explore_temperature, batch_generator(batch.example_ids),
        )  # fmt: skip
    else:
        chosen = select_candidates(ids, sources, keys, cfg.num_retrieved)
    return attach_chosen(batch, chosen, store, special, cfg)


def attach_chosen(
    batch: RealmBatch, chosen: Tensor, store: BlockStore, special: SpecialIds, cfg: RetrieverConfig
) -> RealmBatch:
    """``batch`` with the candidate slots of ``chosen`` ([B, K-1] block ids, -1 for none) attached: what ``retrieve``
    does after its search, and what a resumed trainer does with the choice its checkpoint holds."""
    batch.candidates = build_candidates(batch, chosen, store, special, cfg.max_block_length)
    return batch


def start_search(
    model: RealmModel,
    batch: RealmBatch,
    index: DocumentIndex,
    store: BlockStore,
    special: SpecialIds,
    cfg: RetrieverConfig,
    autocast: AbstractContextManager | None = None,
) -> Callable[[], RealmBatch]:
    """The trainer's retrieval of a host ``batch``, in two parts: embeds its queries now, on the model's device, with
    the live query embedder and no dropout; returns the search and packing (host work, on the host batch), bound to
    ``index``, to run now or on another thread (``realm.trainer.candidate_prefetch``)."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    with torch.no_grad(), autocast or nullcontext():
        query_emb = model.embed_queries(batch.to(device)).float().cpu()
    model.train(was_training)
    return functools.partial(retrieve, query_emb, batch, index, store, special, cfg, explore=True)
