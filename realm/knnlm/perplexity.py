"""Perplexity with and without the datastore, over a whole evaluation set, and sweeps that reuse one search.

The LM pass and the k-nearest-neighbour search run once (``collect``), keeping every scored token's LM
log-probability and its ``k_max`` neighbours (scores and token values, best first). Everything else is arithmetic
on those: perplexity for any ``k <= k_max`` (the first k columns), ``tau`` and ``lambda`` (``score``), so a sweep of
hundreds of settings costs one search.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from transformers import PreTrainedModel

from realm.core.atomic import write_text_atomic
from realm.core.checks import Problems
from realm.core.errors import ConfigError
from realm.core.logging import progress
from realm.knnlm import knn
from realm.knnlm.bootstrap import BootstrapConfig, PairedDifference, paired_bootstrap
from realm.knnlm.datastore import Datastore, model_fingerprint
from realm.knnlm.lm import LMConfig, num_targets, score_documents

logger = logging.getLogger(__name__)


@dataclass(kw_only=True, slots=True)
class KNNConfig:
    """kNN-LM's inference settings (Khandelwal et al.: k 1024, lambda 0.25 in-domain, 0.65 for domain adaptation)."""

    k: int = 1024
    """Neighbours retrieved per token (clamped to the datastore's size)."""
    lambda_: float = 0.25
    """Weight of p_kNN in the interpolation."""
    tau: float = 1.0
    """Softmax temperature over the neighbours' scores (negative squared distances with L2)."""
    recompute: bool = False
    """Exact scores from the stored keys instead of the index's (approximate, e.g. IVF-PQ) ones."""
    gpu_search: bool = False
    """Search the datastore on the GPUs (``realm.index``'s GPU path): through faiss-gpu where it is installed (any
    index), else an exact (Flat) datastore by torch on the CUDA devices (``realm.index.torch_search``); an IVF-PQ
    datastore without faiss-gpu stays on FAISS's CPU search. Pair it with ``lm.device=cuda``."""
    search_batch: int = 2048
    """Queries per search call: exact FAISS reads the whole key matrix once per call, so large batches are much
    faster (measured: 6x from 256 to 2048 queries on 300k x 128 keys)."""

    def __post_init__(self) -> None:
        problems = Problems()
        if self.k <= 0 or self.search_batch <= 0:
            problems.add(f"k and search_batch must be positive, got {self.k}, {self.search_batch}")
        if not 0.0 <= self.lambda_ <= 1.0:
            problems.add(f"lambda_ must be in [0, 1], got {self.lambda_}")
        if not self.tau > 0:
            problems.add(f"tau must be positive, got {self.tau}")
        problems.raise_if_any()


@dataclass(slots=True)
class Neighbours:
    """Every scored token of an evaluation set with its LM log-probability and its neighbours, best first."""

    targets: Tensor  # [T] int64
    lm_log_probs: Tensor  # [T] float32
    scores: Tensor  # [T, k_max] float32 (-inf: unfilled)
    values: Tensor  # [T, k_max] int32
    ids: Tensor  # [T, k_max] int64 datastore entry ids (-1: unfilled)
    docs: Tensor  # [T]
    positions: Tensor  # [T]
    lm_seconds: float
    search_seconds: float

    @property
    def num_tokens(self) -> int:
        return len(self.targets)


def check_compatible(model: PreTrainedModel, store: Datastore) -> None:
    """The datastore's keys must come from this LM: a datastore of another model is refused, naming both."""
    expected = store.manifest.get("lm_sha256")
    if expected != model_fingerprint(model):
        raise ConfigError(
            f"{store.path} was built from other LM weights ({store.manifest.get('lm')}, sha256 {str(expected)[:12]}) "
            "than the model evaluated; rebuild the datastore with this LM"
        )


def collect(
    model: PreTrainedModel, docs: list[np.ndarray], lm_cfg: LMConfig, store: Datastore | None, cfg: KNNConfig
) -> Neighbours:
    """One LM pass over ``docs`` and, with a datastore, one search of ``cfg.k`` neighbours per token."""
    total = int(num_targets(docs).sum())
    if total == 0:
        raise ConfigError("the evaluation set has no token to score (every document is empty)")
    key_type, layer = (store.manifest["key_type"], store.key_layer) if store is not None else ("ffn_input", -1)
    names = ("targets", "lm", "scores", "values", "ids", "docs", "positions")
    parts: dict[str, list[Tensor]] = {name: [] for name in names}
    lm_seconds = search_seconds = 0.0
    bar = progress(total, "kNN-LM evaluation", unit="tok")
    pending: list[Tensor] = []  # keys waiting for a search call of search_batch queries

    def search_pending() -> float:
        started = time.monotonic()
        queries = torch.cat(pending)
        pending.clear()
        scores, values, ids = store.search(queries, cfg.k, recompute=cfg.recompute)
        parts["scores"].append(scores)
        parts["values"].append(values.to(torch.int32))
        parts["ids"].append(ids)
        return time.monotonic() - started

    started = time.monotonic()
    try:
        for scored in score_documents(model, docs, lm_cfg, key_type, layer=layer, want_keys=store is not None):
            lm_seconds += time.monotonic() - started
            for name, tensor in (("targets", scored.targets), ("lm", scored.lm_log_probs), ("docs", scored.docs),
                                 ("positions", scored.positions)):  # fmt: skip
                parts[name].append(tensor)
            if store is not None:
                pending.append(scored.keys)
                if sum(len(p) for p in pending) >= cfg.search_batch:
                    search_seconds += search_pending()
            bar.update(len(scored.targets))
            started = time.monotonic()
        if store is not None and pending:
            search_seconds += search_pending()
    finally:
        bar.close()
    cat = {name: torch.cat(tensors) if tensors else torch.empty(0, 0) for name, tensors in parts.items()}
    return Neighbours(
        targets=cat["targets"],
        lm_log_probs=cat["lm"],
        scores=cat["scores"],
        values=cat["values"],
        ids=cat["ids"],
        docs=cat["docs"],
        positions=cat["positions"],
        lm_seconds=lm_seconds,
        search_seconds=search_seconds,
    )


def knn_token_log_probs(neighbours: Neighbours, k: int, tau: float) -> Tensor:
    """[T] log p_kNN of every target with the first ``k`` neighbours (-inf everywhere without a datastore)."""
    if neighbours.scores.numel() == 0:
        return torch.full_like(neighbours.lm_log_probs, -math.inf)
    k = min(k, neighbours.scores.shape[1])
    return knn.knn_target_log_probs(neighbours.scores[:, :k], neighbours.values[:, :k].long(), neighbours.targets, tau)


def token_log_probs(neighbours: Neighbours, k: int, tau: float, lam: float) -> tuple[Tensor, Tensor]:
    """([T] log p_kNN, [T] interpolated log p) with the first ``k`` neighbours."""
    knn_log = knn_token_log_probs(neighbours, k, tau)
    return knn_log, knn.interpolate(neighbours.lm_log_probs, knn_log, lam)


def _row(neighbours: Neighbours, k: int, tau: float, lam: float, knn_log: Tensor) -> dict[str, Any]:
    mixed = knn.interpolate(neighbours.lm_log_probs, knn_log, lam)
    n = neighbours.num_tokens
    tokens_per_s = n / max(neighbours.lm_seconds, 1e-9)
    return {
        "k": k,
        "tau": tau,
        "lambda": lam,
        "tokens": n,
        "ppl_lm": knn.perplexity(-neighbours.lm_log_probs.double().sum().item(), n),
        "ppl_knn": knn.perplexity(-knn_log.double().sum().item(), n),
        "ppl_knnlm": knn.perplexity(-mixed.double().sum().item(), n),
        "lm_tokens_per_s": round(tokens_per_s, 1),
        "knnlm_tokens_per_s": round(n / max(neighbours.lm_seconds + neighbours.search_seconds, 1e-9), 1),
    }


def score(neighbours: Neighbours, k: int, tau: float, lam: float) -> dict[str, Any]:
    """Perplexities of the LM alone, of p_kNN alone and of the interpolation, for one (k, tau, lambda)."""
    return _row(neighbours, k, tau, lam, knn_token_log_probs(neighbours, k, tau))


def sweep(
    neighbours: Neighbours, ks: Iterable[int], taus: Iterable[float], lambdas: Iterable[float]
) -> list[dict[str, Any]]:
    """``score`` for every combination (one search serves them all: k must not exceed the collected k; p_kNN is
    computed once per (k, tau) and shared by every lambda)."""
    k_max = neighbours.scores.shape[1] if neighbours.scores.numel() else 0
    rows = []
    for k in ks:
        if k > k_max:
            raise ConfigError(f"sweep k={k} is more than the {k_max} neighbours collected; raise knn.k")
        for tau in taus:
            knn_log = knn_token_log_probs(neighbours, k, tau)
            rows.extend(_row(neighbours, k, tau, lam, knn_log) for lam in lambdas)
    return rows


def best(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The row of lowest interpolated perplexity (the first of a tie, so grid order breaks ties)."""
    if not rows:
        raise ConfigError("no setting to choose from: the grid is empty")
    return min(rows, key=lambda r: r["ppl_knnlm"])


def choose(
    valid: Neighbours, ks: Iterable[int], taus: Iterable[float], lambdas: Iterable[float]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the chosen row, the whole grid): every (k, tau, lambda) scored on the validation tokens, the lowest kNN-LM
    perplexity chosen. The first half of the tuning protocol; ``report`` is the second."""
    grid = sweep(valid, ks, taus, lambdas)
    return best(grid), grid


def report(test: Neighbours, chosen: dict[str, Any], cfg: BootstrapConfig) -> tuple[dict[str, Any], PairedDifference]:
    """(``score`` of ``test`` at the chosen k, tau, lambda; the kNN-LM against the LM alone on test's tokens with
    its paired-bootstrap interval, documents as ``test.docs`` for ``cfg.unit="document"``)."""
    k, tau, lam = chosen["k"], chosen["tau"], chosen["lambda"]
    knn_log = knn_token_log_probs(test, k, tau)
    mixed = knn.interpolate(test.lm_log_probs, knn_log, lam)
    return _row(test, k, tau, lam, knn_log), paired_bootstrap(test.lm_log_probs, mixed, cfg, groups=test.docs)


def write_token_records(path: str | Path, neighbours: Neighbours, k: int, tau: float, lam: float) -> None:
    """One JSON line per scored token: document, position, token, p_lm, p_knn, lambda, p (written atomically)."""
    knn_log, mixed = token_log_probs(neighbours, k, tau, lam)
    lines = []
    for i in range(neighbours.num_tokens):
        record = {
            "doc": int(neighbours.docs[i]),
            "position": int(neighbours.positions[i]),
            "token": int(neighbours.targets[i]),
            "p_lm": math.exp(float(neighbours.lm_log_probs[i])),
            "p_knn": math.exp(float(knn_log[i])),
            "lambda": lam,
            "p": math.exp(float(mixed[i])),
        }
        lines.append(json.dumps(record))
    write_text_atomic(Path(path), "\n".join(lines) + "\n")
