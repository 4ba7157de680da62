"""The continuous cache of Grave et al. (2017), the baseline kNN-LM is compared with: each token's neighbours are the
earlier tokens of its own document, keyed by the hidden state that predicted them, instead of a datastore.

At the token predicted from key ``h_t``, the cache holds ``(h_j, w_j)`` for every earlier scored token ``j`` of the
same document (``w_j`` the token itself), scored like a datastore entry (negative squared L2 distance or inner
product), so ``realm.knnlm.knn`` turns its top k into ``p_cache`` and the same interpolation, sweeps and tuning
protocol apply. The first token of a document has an empty cache (every slot unfilled: ``p_cache = 0``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def cache_neighbours(keys: Tensor, targets: Tensor, docs: Tensor, k: int, metric: str = "l2") -> tuple[Tensor, Tensor]:
    """([T, k] scores, [T, k] token values), best first: every token's k best earlier tokens of its own document.

    Args:
        keys: [T, D] the key each token was predicted from, tokens of a document contiguous and in order (as
            ``realm.knnlm.perplexity.collect`` scores them).
        targets: [T] the tokens.
        docs: [T] each token's document.
        k: Neighbours kept (slots beyond a token's history are -inf with value 0).
        metric: ``l2`` or ``ip``.
    """
    if metric not in ("l2", "ip"):
        raise ValueError(f"metric must be l2 or ip, got {metric!r}")
    if not (len(keys) == len(targets) == len(docs)) or k <= 0:
        raise ValueError("keys, targets and docs must give one row per token, and k must be positive")
    scores = torch.full((len(keys), k), -math.inf)
    values = torch.zeros((len(keys), k), dtype=torch.long)
    starts = torch.nonzero(torch.cat([torch.tensor([True]), docs[1:] != docs[:-1]])).flatten().tolist()
    for start, end in zip(starts, [*starts[1:], len(keys)]):
        h = keys[start:end].float()
        pair = h @ h.T if metric == "ip" else -torch.cdist(h, h).pow(2)
        earlier = torch.ones_like(pair, dtype=torch.bool).tril(-1)  # note: row t sees columns j < t only
        pair = pair.masked_fill(~earlier, -math.inf)
        top = pair.topk(min(k, end - start), dim=1)
        width = top.values.shape[1]
        scores[start:end, :width] = top.values
        values[start:end, :width] = torch.where(torch.isfinite(top.values), targets[start:end][top.indices], 0)
    return scores, values
