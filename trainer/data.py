"""Pre-training data: the knowledge corpus blocks, the masked-sentence stream, and a resumable batch order.

The batch order is a pure function of (seed, step), so resuming at step N needs no loader state: the sampler simply
starts at N. The global batch of a step is cut into ``accum_steps`` micro-batches and each process takes its own slice
of each (``rank::world_size``), so the set of examples an optimizer step sees depends only on the global batch size:
one process with batch 2B, two processes with batch B, or one process with batch B and 2 micro-batches see the same.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import datasets
import numpy as np
from torch.utils.data import DataLoader, Dataset, Sampler

from realm.batch import PretrainCollator
from realm.masking import MASKING_MODES, MaskingMode
from realm.packing import SpecialIds
from realm.retrieval import uid_hash
from realm.sentences import load_jsonl_dataset, prepare_sentences
from realm.tagging import TaggingConfig, build_tagger

logger = logging.getLogger(__name__)


@dataclass(kw_only=True, slots=True)
class DataConfig:
    """Where the corpus, sentences and vocabulary live, and how queries are masked."""

    tokenizer: str = ""
    """Tokenizer folder or hub name (``realm vocab`` trains one for corpora without a vocabulary)."""
    blocks: str = ""
    """Saved blocks dataset of the knowledge corpus Z (``realm blocks`` builds it)."""
    sentences: str = ""
    """jsonl of pre-training sentences X: ``text`` and optionally ``source_uid`` (uid of the block it came from)."""
    heldout: str = ""
    """Optional jsonl of evaluation sentences with gold ``answer_start``/``answer_end`` character offsets."""
    masking: MaskingMode = "salient"
    """``salient`` (REALM), or the paper's ablations ``random_span`` and ``random_token``."""
    tagging: TaggingConfig = field(default_factory=TaggingConfig)
    cache_dir: str = ""
    """Where prepared (tokenised + tagged) sentences are cached; default ``RUN/data``."""

    def __post_init__(self) -> None:
        if self.masking not in MASKING_MODES or self.masking == "gold":
            raise ValueError(f"masking must be salient, random_span or random_token, got {self.masking!r}")


def prepared_sentences(
    path: str, tokenizer, tagger_cfg: TaggingConfig | None, max_query_length: int, cache_dir: Path
) -> datasets.Dataset:
    """Tokenised sentences with salient spans, cached under ``cache_dir`` keyed by file name and settings."""
    source = Path(path)
    key = f"{source.stem}-q{max_query_length}-{tagger_cfg.kind if tagger_cfg else 'gold'}"
    target = cache_dir / key
    stamp = f"{source.resolve()}:{source.stat().st_size}:{source.stat().st_mtime_ns}"
    if (target / "realm_source.txt").is_file() and (target / "realm_source.txt").read_text() == stamp:
        return datasets.load_from_disk(str(target))
    tagger = build_tagger(tagger_cfg) if tagger_cfg else None
    # note: the json builder cache goes under the run too, not under ~/.cache
    ds = prepare_sentences(load_jsonl_dataset(path, cache_dir=cache_dir / "hf"), tokenizer, tagger, max_query_length)
    ds.save_to_disk(str(target))
    (target / "realm_source.txt").write_text(stamp)
    return datasets.load_from_disk(str(target))


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
        if num_examples < global_batch:
            raise ValueError(f"{num_examples} examples cannot fill a global batch of {global_batch}")
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


def pretrain_loader(
    rows: datasets.Dataset,
    special: SpecialIds,
    cfg: DataConfig,
    *,
    max_query_length: int,
    batch_size: int,
    seed: int,
    start_step: int,
    rank: int = 0,
    world_size: int = 1,
    accum_steps: int = 1,
) -> DataLoader:
    """The masked-query stream starting at optimizer step ``start_step``, ``accum_steps`` micro-batches a step (the
    test seam: tests pass their own rows)."""
    sampler = StepBatchSampler(len(rows), batch_size, seed, start_step, rank, world_size, accum_steps)
    collator = PretrainCollator(special, max_query_length, cfg.masking, seed)
    return DataLoader(KeyedExamples(rows), batch_sampler=sampler, collate_fn=collator, num_workers=0)
