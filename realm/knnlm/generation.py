"""kNN-LM at generation time: a ``transformers.LogitsProcessor`` that mixes p_kNN into every step of ``generate``.

At each step the key of the position being predicted from is read by ``realm.knnlm.lm.KeyReader`` (the same hook
that built the datastore), its k nearest neighbours are searched in the datastore, and the step's scores become

    log p(w) = log((1 - lambda) p_LM(w) + lambda p_kNN(w))

computed sparsely: p_kNN has at most k non-zero entries per row, so the LM's log-probabilities are shifted by
log(1 - lambda) everywhere and only the (at most k) neighbour tokens are combined with ``log lambda + log p_kNN`` and
scattered back. Nothing vocabulary-wide is built for the kNN part; the only [batch, vocab] tensors are the LM's own.

With the KV cache (``use_cache=True``) a step's forward sees only the new position; without it, the whole sequence.
Either way the last position of that forward is the one the next token is predicted from, so both give the same
result. ``generate`` passes raw logits (a beam search, log-probabilities): both are log-softmaxed first, so the
output is a normalised log-distribution either way.

Processors run in list order and ``generate`` appends a custom processor after the ones it makes from the
generation config (repetition penalty, and with ``do_sample`` the temperature / top-k / top-p warpers), so put any
warper in the same ``logits_processor`` list after this one, and leave it unset in the generation config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor
from transformers import LogitsProcessor, PreTrainedModel

from realm.core.checks import Problems
from realm.core.errors import ConfigError, RunError
from realm.index.mips import METRICS
from realm.knnlm import knn
from realm.knnlm.datastore import Datastore
from realm.knnlm.lm import KeyReader
from realm.knnlm.perplexity import check_compatible


@dataclass(kw_only=True, slots=True)
class KNNGenerationConfig:
    """kNN-LM's settings for generation (Khandelwal et al.: k 1024, lambda 0.25 in-domain)."""

    k: int = 1024
    """Neighbours retrieved per step and sequence (clamped to the datastore's size)."""
    lambda_: float = 0.25
    """Weight of p_kNN in the interpolation; 0 leaves the LM's distribution unchanged."""
    tau: float = 1.0
    """Softmax temperature over the neighbours' scores (negative squared distances with L2)."""
    metric: str = ""
    """The metric the datastore must have been built with ("l2" or "ip"); empty: whichever it was. tau is on the
    scale of that metric's scores, so a tau tuned for one metric is meaningless with the other."""
    recompute: bool = False
    """Exact scores from the stored keys instead of the index's (approximate, e.g. IVF-PQ) ones."""
    enable_fingerprint_check: bool = True
    """Refuse a datastore whose keys came from other LM weights (hashes the weights once, at construction)."""

    def __post_init__(self) -> None:
        problems = Problems()
        if self.k <= 0:
            problems.add(f"k must be positive, got {self.k}")
        if not 0.0 <= self.lambda_ <= 1.0:
            problems.add(f"lambda_ must be in [0, 1], got {self.lambda_}")
        if not self.tau > 0:
            problems.add(f"tau must be positive, got {self.tau}")
        if self.metric and self.metric not in METRICS:
            problems.add(f"metric must be empty or one of {', '.join(sorted(METRICS))}, got {self.metric!r}")
        problems.raise_if_any()


def mix_sparse(lm_scores: Tensor, ids: Tensor, knn_log_probs: Tensor, lam: float) -> Tensor:
    """[B, V] ``log((1 - lam) p_LM + lam p_kNN)`` from [B, V] LM scores (logits or log-probabilities) and p_kNN given
    sparsely as [B, K] token ``ids`` with their [B, K] ``knn_log_probs`` (``knn.knn_neighbour_log_probs``; a
    repeated id must carry the same value). ``lam = 0`` gives ``log_softmax(lm_scores)`` exactly."""
    lm = torch.log_softmax(lm_scores.float(), dim=-1)
    at_neighbours = knn.interpolate(lm.gather(1, ids), knn_log_probs.to(lm), lam)
    # note: a token no neighbour points at has p_kNN = 0, so its mixture is (1 - lam) p_LM: a shift of the LM's row
    # (-inf at lam = 1, where only the neighbours' tokens keep any mass)
    shift = math.log1p(-lam) if lam < 1.0 else -math.inf
    return (lm + shift).scatter_(1, ids, at_neighbours)


class KNNLogitsProcessor(LogitsProcessor):
    """Mixes the datastore's p_kNN into each step of ``model.generate`` (greedy, sampling or beam search).

    Registers a forward hook on ``model`` (``KeyReader``, with the datastore's key type) until ``close``; use it as a
    context manager. One processor serves one model and any number of ``generate`` calls.
    """

    def __init__(self, model: PreTrainedModel, store: Datastore, cfg: KNNGenerationConfig) -> None:
        if cfg.metric and cfg.metric != store.metric:
            raise ConfigError(
                f"{store.path} was built with metric {store.metric!r}, but the generation config expects "
                f"{cfg.metric!r}; use the matching datastore or metric={store.metric!r} (and a tau tuned for it)"
            )
        if cfg.enable_fingerprint_check:
            check_compatible(model, store)
        self.store, self.cfg = store, cfg
        self.reader = KeyReader(model, store.manifest["key_type"], store.key_layer)

    def neighbours(self, keys: Tensor) -> tuple[Tensor, Tensor]:
        """[B, D] keys -> ([B, k'] token ids, [B, k'] log p_kNN of each id), k' = min(k, datastore size): the whole
        kNN part of the step, never vocabulary-wide."""
        scores, values, _ = self.store.search(keys.float(), self.cfg.k, recompute=self.cfg.recompute)
        return knn.knn_neighbour_log_probs(scores, values, self.cfg.tau)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """[B, V] the step's scores -> [B, V] mixed log-probabilities."""
        captured, self.reader.value = self.reader.value, None  # note: consumed, so a stale key is never reused
        if captured is None or captured.shape[0] != scores.shape[0]:
            raise RunError(
                "no key captured for this generation step: the processor must be used with the model it was built "
                f"on, right after its forward pass (captured {None if captured is None else tuple(captured.shape)}, "
                f"scores {tuple(scores.shape)})"
            )
        ids, knn_log_probs = self.neighbours(captured[:, -1])
        return mix_sparse(scores, ids.to(scores.device), knn_log_probs.to(scores.device), self.cfg.lambda_)

    def close(self) -> None:
        self.reader.close()

    def __enter__(self) -> KNNLogitsProcessor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
