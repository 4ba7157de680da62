"""The learned-datastore variant of Xu et al. (ICML 2023, eq. 2): the datastore's keys replaced by a small trained
matrix W_ds, with R rows per vocabulary entry (M maps row r to token r // R), the LM frozen:

    p(w) = (1 - lambda) p_LM(w) + lambda sum_{r: M(r) = w} softmax(mask-to-k(W_ds ⊗ h_ds) / tau)_r

``⊗`` is the negative squared L2 distance or the inner product, as for the real datastore. W_ds starts from each
token's mean key (tokens never seen start at random) and is trained to minimise the interpolated negative
log-likelihood of the datastore corpus; it has ``R * V * D`` parameters against the datastore's ``N * D`` numbers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from realm.knnlm import knn

logger = logging.getLogger(__name__)


@dataclass(kw_only=True, slots=True)
class LearnedConfig:
    rows_per_token: int = 1
    """R: rows of W_ds per vocabulary entry."""
    k: int = 1024
    """mask-to-k: rows kept per query before the softmax."""
    tau: float = 1.0
    lambda_: float = 0.25
    steps: int = 1000
    batch_size: int = 512
    lr: float = 3e-3
    seed: int = 0

    def __post_init__(self) -> None:
        if min(self.rows_per_token, self.k, self.steps, self.batch_size) <= 0 or not self.tau > 0:
            raise ValueError("rows_per_token, k, steps, batch_size and tau must be positive")
        if not 0.0 < self.lambda_ < 1.0:
            raise ValueError(f"lambda_ must be in (0, 1) to train W_ds, got {self.lambda_}")


class LearnedDatastore(nn.Module):
    """W_ds: [V * R, D] rows, row r standing for token r // R."""

    def __init__(self, vocab_size: int, dim: int, rows_per_token: int = 1, metric: str = "l2") -> None:
        super().__init__()
        if metric not in ("l2", "ip"):
            raise ValueError(f"metric must be l2 or ip, got {metric!r}")
        self.vocab_size, self.rows_per_token, self.metric = vocab_size, rows_per_token, metric
        self.weight = nn.Parameter(torch.zeros(vocab_size * rows_per_token, dim))

    @property
    def num_parameters(self) -> int:
        return self.weight.numel()

    @torch.no_grad()
    def init_from(self, keys: Tensor, values: Tensor, seed: int = 0) -> None:
        """Each token's rows start at the mean of its keys (plus small noise between its R rows); tokens with no
        key start at random with the keys' scale."""
        generator = torch.Generator().manual_seed(seed)
        keys = keys.float()
        dim = keys.shape[1]
        sums = torch.zeros(self.vocab_size, dim).index_add_(0, values.long(), keys)
        counts = torch.bincount(values.long(), minlength=self.vocab_size).float()
        means = sums / counts.clamp(min=1)[:, None]
        scale = keys.std().item()
        unseen = counts == 0
        means[unseen] = torch.randn(int(unseen.sum()), dim, generator=generator) * scale
        rows = means.repeat_interleave(self.rows_per_token, 0)
        noise = torch.randn(rows.shape, generator=generator) * 0.01 * scale
        self.weight.copy_(rows + noise * (self.rows_per_token > 1))

    def scores(self, queries: Tensor) -> Tensor:
        """[B, V * R]: ``W_ds ⊗ h`` (negative squared L2 or inner product)."""
        dots = queries @ self.weight.T
        if self.metric == "ip":
            return dots
        return 2 * dots - (self.weight * self.weight).sum(1)[None, :] - (queries * queries).sum(1, keepdim=True)

    def target_log_probs(self, queries: Tensor, targets: Tensor, k: int, tau: float) -> Tensor:
        """[B] ``log p_ds(target)``: the mass of the target's rows in softmax(mask-to-k(scores) / tau)."""
        log_rows = torch.log_softmax(knn.mask_to_k(self.scores(queries.float()), k) / tau, dim=1)
        rows = targets.long()[:, None] * self.rows_per_token + torch.arange(self.rows_per_token)[None, :]
        # note: a target whose rows all fall outside the top k has probability 0; a finite floor (e^-1e4 is 0 in
        # float) keeps the gradient of logsumexp over all -inf from turning into NaN
        return torch.logsumexp(log_rows.gather(1, rows).clamp(min=-1e4), 1)


def train_learned(
    keys: Tensor, values: Tensor, lm_log_probs: Tensor, vocab_size: int, cfg: LearnedConfig, metric: str = "l2"
) -> tuple[LearnedDatastore, list[float]]:
    """Trains W_ds on the datastore corpus (its keys, values and the LM's log-probabilities of those values);
    returns the module and the loss every 10% of the steps."""
    module = LearnedDatastore(vocab_size, keys.shape[1], cfg.rows_per_token, metric)
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
def learned_log_probs(module: LearnedDatastore, keys: Tensor, targets: Tensor, k: int, tau: float) -> Tensor:
    """[T] ``log p_ds(target)`` for every evaluation token, in batches."""
    rows = range(0, len(keys), 1024)
    out = [module.target_log_probs(keys[s : s + 1024], targets[s : s + 1024], k, tau) for s in rows]
    return torch.cat(out) if out else torch.empty(0)

