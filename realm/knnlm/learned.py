"""The learned-datastore variant of Xu et al. (ICML 2023, eq. 2): the datastore's keys replaced by a small trained
matrix W_ds whose rows each stand for one token (M maps row r to its token), the LM frozen:

    p(w) = (1 - lambda) p_LM(w) + lambda sum_{r: M(r) = w} softmax(mask-to-k(W_ds ⊗ h_ds) / tau)_r

``⊗`` is the negative squared L2 distance or the inner product, as for the real datastore. Rows are allocated
(``allocate_rows``) ``uniform``: R rows for every vocabulary entry, or by ``frequency``: the same R x V rows in all,
one per entry and the rest in proportion to each token's count in the datastore corpus (Xu et al.'s variants). W_ds
starts from each token's mean key (tokens never seen start at random) and is trained to minimise the interpolated
negative log-likelihood of the datastore corpus; it has ``rows * D`` parameters against the datastore's ``N * D``
numbers. Its top-k rows are neighbours like a datastore's (``learned_neighbours``), so every kNN-LM function
(``realm.knnlm.knn``, the sweeps and the tuning protocol) applies to it unchanged.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from realm.core.checks import Problems
from realm.knnlm import knn

logger = logging.getLogger(__name__)

ALLOCATIONS = ("uniform", "frequency")


@dataclass(kw_only=True, slots=True)
class LearnedConfig:
    rows_per_token: int = 1
    """R: rows of W_ds per vocabulary entry (on average, with ``allocation="frequency"``)."""
    allocation: str = "uniform"
    """How the R x V rows are shared among tokens: ``uniform`` (R each) or ``frequency`` (by datastore counts)."""
    k: int = 1024
    """mask-to-k: rows kept per query before the softmax."""
    tau: float = 1.0
    lambda_: float = 0.25
    steps: int = 1000
    batch_size: int = 512
    lr: float = 3e-3
    seed: int = 0

    def __post_init__(self) -> None:
        problems = Problems()
        if min(self.rows_per_token, self.k, self.steps, self.batch_size) <= 0 or not self.tau > 0:
            problems.add("rows_per_token, k, steps, batch_size and tau must be positive")
        if not 0.0 < self.lambda_ < 1.0:
            problems.add(f"lambda_ must be in (0, 1) to train W_ds, got {self.lambda_}")
        if self.allocation not in ALLOCATIONS:
            problems.add(f"allocation must be one of {', '.join(ALLOCATIONS)}, got {self.allocation!r}")
        problems.raise_if_any()


def allocate_rows(counts: Tensor, rows_per_token: int, allocation: str = "uniform") -> Tensor:
    """[R * V] int64 row -> token map, rows of a token contiguous. ``frequency``: every token one row, the other
    (R - 1) * V rows in proportion to ``counts`` ([V] occurrences in the datastore), by largest remainder."""
    vocab = len(counts)
    if allocation == "uniform":
        per_token = torch.full((vocab,), rows_per_token, dtype=torch.int64)
    elif allocation == "frequency":
        extra = (rows_per_token - 1) * vocab
        share = counts.double() / max(float(counts.sum()), 1.0) * extra
        per_token = share.floor().long()
        left = extra - int(per_token.sum())
        if left > 0:  # note: largest remainders first, ties by token id (a stable sort), so the map is deterministic
            order = torch.from_numpy(np.argsort(-(share - share.floor()).numpy(), kind="stable"))
            per_token[order[:left]] += 1
        per_token += 1
    else:
        raise ValueError(f"allocation must be one of {', '.join(ALLOCATIONS)}, got {allocation!r}")
    return torch.repeat_interleave(torch.arange(vocab), per_token)


class LearnedDatastore(nn.Module):
    """W_ds: one row per entry of ``row_tokens`` ([rows] the token each row stands for, ``allocate_rows``)."""

    def __init__(self, row_tokens: Tensor, vocab_size: int, dim: int, metric: str = "l2") -> None:
        super().__init__()
        if metric not in ("l2", "ip"):
            raise ValueError(f"metric must be l2 or ip, got {metric!r}")
        if row_tokens.ndim != 1 or (len(row_tokens) and not 0 <= int(row_tokens.min()) <= int(row_tokens.max()) <
                                    vocab_size):  # fmt: skip
            raise ValueError(f"row_tokens must be a [rows] list of token ids below {vocab_size}")
        self.vocab_size, self.metric = vocab_size, metric
        self.register_buffer("row_tokens", row_tokens.long())
        self.weight = nn.Parameter(torch.zeros(len(row_tokens), dim))

    @property
    def num_parameters(self) -> int:
        return self.weight.numel()

    @torch.no_grad()
    def init_from(self, keys: Tensor, values: Tensor, seed: int = 0) -> None:
        """Each token's rows start at the mean of its keys (plus small noise between the rows of a token with
        several); tokens with no key start at random with the keys' scale."""
        generator = torch.Generator().manual_seed(seed)
        keys = keys.float()
        dim = keys.shape[1]
        sums = torch.zeros(self.vocab_size, dim).index_add_(0, values.long(), keys)
        counts = torch.bincount(values.long(), minlength=self.vocab_size).float()
        means = sums / counts.clamp(min=1)[:, None]
        scale = keys.std().item()
        unseen = counts == 0
        means[unseen] = torch.randn(int(unseen.sum()), dim, generator=generator) * scale
        shared = torch.bincount(self.row_tokens, minlength=self.vocab_size)[self.row_tokens] > 1
        noise = torch.randn((len(self.row_tokens), dim), generator=generator) * 0.01 * scale
        self.weight.copy_(means[self.row_tokens] + noise * shared[:, None])

    def scores(self, queries: Tensor) -> Tensor:
        """[B, rows]: ``W_ds ⊗ h`` (negative squared L2 or inner product)."""
        dots = queries @ self.weight.T
        if self.metric == "ip":
            return dots
        return 2 * dots - (self.weight * self.weight).sum(1)[None, :] - (queries * queries).sum(1, keepdim=True)

    def target_log_probs(self, queries: Tensor, targets: Tensor, k: int, tau: float) -> Tensor:
        """[B] ``log p_ds(target)``: the mass of the target's rows in softmax(mask-to-k(scores) / tau)."""
        log_rows = torch.log_softmax(knn.mask_to_k(self.scores(queries.float()), k) / tau, dim=1)
        own = self.row_tokens[None, :] == targets.long()[:, None]
        # note: a target whose rows all fall outside the top k has probability 0; a finite floor (e^-1e4 is 0 in
        # float) keeps the gradient of logsumexp over all -inf from turning into NaN
        return torch.logsumexp(torch.where(own, log_rows.clamp(min=-1e4), torch.full_like(log_rows, -1e4)), 1)


def train_learned(
    keys: Tensor, values: Tensor, lm_log_probs: Tensor, vocab_size: int, cfg: LearnedConfig, metric: str = "l2"
) -> tuple[LearnedDatastore, list[float]]:
    """Trains W_ds on the datastore corpus (its keys, values and the LM's log-probabilities of those values);
    returns the module and the loss every 10% of the steps."""
    counts = torch.bincount(values.long(), minlength=vocab_size)
    module = LearnedDatastore(allocate_rows(counts, cfg.rows_per_token, cfg.allocation), vocab_size, keys.shape[1],
                              metric)  # fmt: skip
    module.init_from(keys, values, cfg.seed)
    optimizer = torch.optim.Adam(module.parameters(), lr=cfg.lr * keys.float().std().item())
    generator = torch.Generator().manual_seed(cfg.seed)
    history = []
    for step in range(cfg.steps):
        rows = torch.randint(0, len(keys), (cfg.batch_size,), generator=generator)
        ds_log = module.target_log_probs(keys[rows].float(), values[rows], cfg.k, cfg.tau)
        loss = -knn.interpolate(lm_log_probs[rows].float(), ds_log, cfg.lambda_).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if (step + 1) % max(cfg.steps // 10, 1) == 0:
            history.append(round(loss.item(), 4))
            logger.info("W_ds step %d/%d: interpolated NLL %.4f", step + 1, cfg.steps, loss.item())
    return module.eval(), history


@torch.no_grad()
def learned_neighbours(module: LearnedDatastore, keys: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """([T, k'] scores, [T, k'] token values), best first, k' = min(k, rows): W_ds's top-k rows for every key, the
    same form as a datastore search, so ``knn.knn_target_log_probs`` of them is ``log p_ds``."""
    scores, values = [], []
    for first in range(0, len(keys), 1024):
        top = module.scores(keys[first : first + 1024].float()).topk(min(k, len(module.row_tokens)), dim=1)
        scores.append(top.values)
        values.append(module.row_tokens[top.indices])
    width = min(k, len(module.row_tokens))
    return (torch.cat(scores), torch.cat(values)) if scores else (torch.empty(0, width), torch.empty(0, width).long())


def learned_log_probs(module: LearnedDatastore, keys: Tensor, targets: Tensor, k: int, tau: float) -> Tensor:
    """[T] ``log p_ds(target)`` for every evaluation token (-inf where none of the target's rows is in the top k)."""
    scores, values = learned_neighbours(module, keys, k)
    return knn.knn_target_log_probs(scores, values, targets.long(), tau)
