"""Why a token got its probability: the k nearest datastore entries of one position's key, with their weights, their
tokens and the datastore text each key was computed from.

For a tokenized text (``[BOS] tokens``, as ``realm.knnlm.lm.tokenize_documents`` makes it) and positions in it (1 =
the first token; the ``position`` of ``realm knnlm evaluate``'s tokens.jsonl), the text is scored exactly as the
evaluation scores it (``score_documents``: same windows, same key hook), each position's key is searched in the
datastore (``Datastore.search``), and the kNN-LM's arithmetic comes from ``realm.knnlm.knn``: each neighbour's share
of p_kNN, p_kNN of the target and the interpolation. So the figures equal tokens.jsonl's for the same document,
position and setting.

A neighbour's context is read from the datastore itself: its values are the corpus's tokens in order and
``doc_starts.npy`` says where each document begins (``Datastore.locate``). A datastore built before that file existed
still gives scores, weights and tokens; its contexts are reported as unavailable.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from realm.core.checks import Problems
from realm.core.errors import ArgumentError
from realm.knnlm import knn
from realm.knnlm.datastore import DOC_STARTS_FILE, Datastore
from realm.knnlm.lm import LMConfig, bos_id, score_documents
from realm.knnlm.perplexity import KNNConfig

NO_PROVENANCE = (
    "unavailable: {path} records no provenance ({file}; datastores built before it lack it), so the text behind "
    "each key is unknown; rebuild it with `realm knnlm build` to see contexts"
)


@dataclass(kw_only=True, slots=True)
class InspectConfig:
    """What an inspection shows about each position and neighbour."""

    context_tokens: int = 16
    """Tokens of text shown before the inspected token and before each neighbour's token (the key saw them, and
    possibly more: up to ``lm.context_length``)."""
    num_top_tokens: int = 5
    """Tokens of highest p_kNN listed per position (the neighbours' mass summed by token)."""

    def __post_init__(self) -> None:
        problems = Problems()
        if self.context_tokens < 1 or self.num_top_tokens < 0:
            problems.add(f"context_tokens must be >= 1 and num_top_tokens >= 0, got {self.context_tokens}, "
                         f"{self.num_top_tokens}")  # fmt: skip
        problems.raise_if_any()


@dataclass(slots=True)
class Context:
    """Up to ``context_tokens`` tokens of a document before a token; ``ids`` start with the BOS when they reach the
    document's start (``starts_document``), and ``text`` is the decoded tokens after it."""

    ids: list[int]
    text: str
    starts_document: bool


@dataclass(slots=True)
class Neighbour:
    """One of the k nearest datastore entries of a position's key."""

    rank: int
    """1 = nearest."""
    entry: int
    """Entry id in the datastore (row of keys.npy / values.npy)."""
    score: float
    """Higher is closer: -squared L2 distance, or the inner product (the index's score unless knn.recompute)."""
    distance: float | None
    """Squared L2 distance (metric l2), else None."""
    weight: float
    """Share of p_kNN: softmax(score / tau) over the k neighbours."""
    value: int
    token: str
    is_target: bool
    """Whether its token is the inspected position's token (its weight then counts toward p_kNN of the target)."""
    doc: int | None
    """Index of its document in the datastore's corpus (None without provenance)."""
    position: int | None
    """Position of its token in that document's ``[BOS] tokens`` (None without provenance)."""
    context: Context | None


@dataclass(slots=True)
class Inspection:
    """One position of a text: its token, the three probabilities, and its neighbours best first."""

    position: int
    target: int
    token: str
    context: Context
    p_lm: float
    p_knn: float
    p: float
    k: int
    tau: float
    lambda_: float
    metric: str
    neighbours: list[Neighbour]
    top_tokens: list[dict[str, Any]]
    """The ``num_top_tokens`` tokens of highest p_kNN: ``{"value", "token", "p_knn"}``."""
    contexts: str
    """"available", or why the neighbours' contexts are not."""

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["lambda"] = out.pop("lambda_")
        return out


def check_positions(tokens: np.ndarray, positions: Sequence[int] | None, where: str) -> list[int]:
    """``positions`` (every token when None or empty), each checked to lie in 1..number of tokens of ``tokens``."""
    num = len(tokens) - 1
    if num < 1:
        raise ArgumentError(f"{where} has no token to inspect (its text is empty after tokenization)")
    if not positions:
        return list(range(1, num + 1))
    bad = [p for p in positions if not 1 <= p <= num]
    if bad:
        raise ArgumentError(f"position {bad[0]} is out of range for {where}: it has {num} tokens, so positions are "
                            f"1..{num} (1 = its first token, as tokens.jsonl counts them)")  # fmt: skip
    return list(positions)


def _context(ids: np.ndarray, starts_document: bool, bos: int, decode: Callable[[list[int]], str]) -> Context:
    ids = [int(i) for i in ids]
    return Context(ids=[bos, *ids] if starts_document else ids, text=decode(ids), starts_document=starts_document)


def _neighbours(store: Datastore, scores, values, ids, log_weights, target: int, cfg: InspectConfig, bos: int,
                decode: Callable[[list[int]], str]) -> list[Neighbour]:  # fmt: skip
    out = []
    valid = ids >= 0  # note: slots an approximate index could not fill carry no entry and no mass
    entries = ids[valid].tolist()
    where = store.locate(np.asarray(entries)) if store.has_provenance else None
    for rank, (entry, score, value, log_w) in enumerate(zip(entries, scores[valid].tolist(), values[valid].tolist(),
                                                            log_weights[valid].tolist()), start=1):  # fmt: skip
        context = doc = position = None
        if where is not None:
            doc, position = int(where[0][rank - 1]), int(where[1][rank - 1])
            context = _context(*store.preceding(entry, cfg.context_tokens), bos, decode)
        out.append(
            Neighbour(
                rank=rank, entry=int(entry), score=score, distance=-score if store.metric == "l2" else None,
                weight=math.exp(log_w), value=int(value), token=decode([int(value)]), is_target=value == target,
                doc=doc, position=position, context=context,
            )
        )  # fmt: skip
    return out


def inspect_positions(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    store: Datastore,
    tokens: np.ndarray,
    positions: Sequence[int] | None,
    lm_cfg: LMConfig,
    knn_cfg: KNNConfig,
    cfg: InspectConfig,
    where: str = "the text",
) -> list[Inspection]:
    """The inspection of each of ``positions`` of ``tokens`` (``[BOS] tokens`` of one text; None: every position).

    One LM pass over the whole text (so each position's key is the one ``realm knnlm evaluate`` searches) and one
    search of ``knn_cfg.k`` neighbours for the positions asked. ``where`` names the text in errors (an out-of-range
    position is an ``ArgumentError``).
    """
    positions = check_positions(tokens, positions, where)
    scored = list(score_documents(model, [tokens], lm_cfg, store.manifest["key_type"], layer=store.key_layer))
    scored_at = torch.cat([s.positions for s in scored])
    # note: score_documents scores every token once, in order, so position p is row p - 1
    assert torch.equal(scored_at, torch.arange(1, len(tokens))), "score_documents skipped or repeated a token"
    rows = torch.tensor([p - 1 for p in positions])
    keys = torch.cat([s.keys for s in scored])[rows]
    lm_log = torch.cat([s.lm_log_probs for s in scored])[rows]
    targets = torch.from_numpy(tokens[positions].astype(np.int64))
    scores, values, ids = store.search(keys, knn_cfg.k, recompute=knn_cfg.recompute)
    log_weights = knn.neighbour_log_weights(scores, knn_cfg.tau)
    knn_log = knn.knn_target_log_probs(scores, values, targets, knn_cfg.tau)
    mixed = knn.interpolate(lm_log, knn_log, knn_cfg.lambda_)
    # note: sparse (the <= k tokens with mass), not knn_log_probs' [Q, V] float64 buffer: Q is every position of a text
    token_ids, token_log = knn.knn_neighbour_log_probs(scores, values, knn_cfg.tau)
    bos = bos_id(tokenizer)
    note = "available" if store.has_provenance else NO_PROVENANCE.format(path=store.path, file=DOC_STARTS_FILE)
    out = []
    for i, position in enumerate(positions):
        first = max(1, position - cfg.context_tokens)
        mass = {v: lp for v, lp in zip(token_ids[i].tolist(), token_log[i].tolist()) if lp > -math.inf}
        top = heapq.nlargest(cfg.num_top_tokens, mass.items(), key=lambda item: item[1])
        out.append(
            Inspection(
                position=position, target=int(targets[i]), token=tokenizer.decode([int(targets[i])]),
                context=_context(tokens[first:position], position - cfg.context_tokens < 1, bos, tokenizer.decode),
                p_lm=math.exp(float(lm_log[i])), p_knn=math.exp(float(knn_log[i])), p=math.exp(float(mixed[i])),
                k=knn_cfg.k, tau=knn_cfg.tau, lambda_=knn_cfg.lambda_, metric=store.metric,
                neighbours=_neighbours(store, scores[i], values[i], ids[i], log_weights[i], int(targets[i]), cfg,
                                       bos, tokenizer.decode),
                top_tokens=[{"value": v, "token": tokenizer.decode([v]), "p_knn": math.exp(lp)} for v, lp in top],
                contexts=note,
            )
        )  # fmt: skip
    return out
