"""A resumable batch order shared by every training loop: a pure function of (seed, step), sliced per process.

Resuming at step N needs no loader state: the sampler simply starts at N. The global batch of a step is cut into
``accum_steps`` micro-batches and each process takes its own slice of each (``rank::world_size``), so the set of
examples an optimizer step sees depends only on the global batch size.
"""

from __future__ import annotations

from typing import Iterator

import datasets
import numpy as np
from torch.utils.data import Dataset, Sampler

from realm.core.errors import ConfigError
from realm.data.block_store import uid_hash


class KeyedExamples(Dataset):
    """Rows of a prepared dataset addressed by ``(epoch, row)`` keys, so masking can be seeded per key."""

    def __init__(self, rows: datasets.Dataset) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, key: tuple[int, int]) -> dict:
        epoch, idx = key
        row = dict(self.rows[int(idx)])
        row["epoch"], row["idx"] = epoch, idx
        row["source_uid_hash"] = uid_hash(row.get("source_uid") or "")
        return row


def check_fills_batch(num_examples: int, global_batch: int, source: str = "the training set") -> None:
    """Raises ``ConfigError`` when ``num_examples`` cannot fill one global batch; jobs call it as soon as their data is
    read, before any other work (a builder indexing, a warm start), with ``source`` naming the file."""
    if num_examples < global_batch:
        raise ConfigError(
            f"{source}: {num_examples} examples cannot fill a global batch of {global_batch} (train.batch_size x "
            "processes x train.grad_accum_steps); give more examples or a smaller --train.batch_size"
        )


class StepBatchSampler(Sampler[list[tuple[int, int]]]):
    """Infinite, deterministic batches: global batch ``step`` is a slice of a per-epoch seeded permutation.

    Yields ``accum_steps`` micro-batches per optimizer step (one list of ``batch_size`` keys each); ``start_step``
    counts optimizer steps.
    """

    def __init__(
        self,
        num_examples: int,
        batch_size: int,
        seed: int,
        start_step: int = 0,
        rank: int = 0,
        world_size: int = 1,
        accum_steps: int = 1,
    ) -> None:
        if accum_steps <= 0:
            raise ValueError(f"accum_steps must be positive, got {accum_steps}")
        global_batch = batch_size * world_size * accum_steps
        check_fills_batch(num_examples, global_batch)
        self.num_examples, self.batch_size, self.seed = num_examples, batch_size, seed
        self.start_step, self.rank, self.world_size, self.accum_steps = start_step, rank, world_size, accum_steps
        self.steps_per_epoch = num_examples // global_batch

    def _permutation(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(self.num_examples)

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        step, cached = self.start_step, (-1, None)
        micro_global = self.batch_size * self.world_size  # one micro-batch of every process
        global_batch = micro_global * self.accum_steps
        while True:
            epoch, position = divmod(step, self.steps_per_epoch)
            if cached[0] != epoch:
                cached = (epoch, self._permutation(epoch))
            rows = cached[1][position * global_batch : (position + 1) * global_batch]
            for micro in range(self.accum_steps):
                chunk = rows[micro * micro_global : (micro + 1) * micro_global]
                yield [(epoch, int(i)) for i in chunk[self.rank :: self.world_size]]
            step += 1
