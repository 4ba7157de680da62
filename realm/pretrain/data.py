"""Pre-training data: the masked-sentence stream and its loader (batch order: ``realm.training.sampler``).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path

import datasets
from torch.utils.data import DataLoader

from realm.core.checks import Problems
from realm.data.masking import MASKING_MODES, MaskingMode
from realm.data.packing import SpecialIds
from realm.data.tag_stage import TagJob, TagStageConfig, complete_manifest, tagged_sentences
from realm.data.tagging import TaggingConfig
from realm.pretrain.batch import PretrainCollator
from realm.run.publication import exclusive_lock
from realm.training.sampler import KeyedExamples, StepBatchSampler

logger = logging.getLogger(__name__)

HELDOUT_SENTENCES_FILE = "heldout_sentences.txt"
"""Where a cloze set held out sentence by sentence lists them, one text a line: what ``prepared_sentences(exclude=)``
skips."""


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
    tag_stage: TagStageConfig = field(default_factory=TagStageConfig)
    """Worker processes and shard size of the tagging stage that prepares ``sentences`` (``realm tag``)."""
    heldout_sentences: str = ""
    """Optional file of sentences held out one by one (one text a line, as the real-text study's reachable cloze writes
    ``heldout_sentences.txt``): X skips them, counted and logged, so a sentence-level held-out set is never trained on
    (the reachable held-out cloze)."""
    cache_dir: str = ""
    """Where prepared (tokenised + tagged) sentences are cached; default ``RUN/data``."""

    def __post_init__(self) -> None:
        problems = Problems()
        if self.masking not in MASKING_MODES or self.masking == "gold":
            problems.add(f"masking must be salient, random_span or random_token, got {self.masking!r}")
        problems.raise_if_any()


def sentence_tag_job(
    path: str, tokenizer, tagger_cfg: TaggingConfig | None, max_query_length: int, cache_dir: Path, exclude: str = ""
) -> TagJob:
    """The tagging job of a sentences file: its cache folder is ``cache_dir/<stem>-q<length>-<tagger>[-x<hash>]``
    (``realm tag`` and ``prepared_sentences`` name it alike, so one fills what the other reads)."""
    source = Path(path)
    key = f"{source.stem}-q{max_query_length}-{tagger_cfg.kind if tagger_cfg else 'gold'}"
    if exclude:
        key += "-x" + hashlib.sha1(str(Path(exclude).resolve()).encode("utf-8")).hexdigest()[:8]
    return TagJob(source=source, target=Path(cache_dir) / key, tokenizer=tokenizer, tagger=tagger_cfg,
                  max_query_length=max_query_length, exclude=exclude)  # fmt: skip


def prepared_sentences(
    path: str,
    tokenizer,
    tagger_cfg: TaggingConfig | None,
    max_query_length: int,
    cache_dir: Path,
    exclude: str = "",
    stage: TagStageConfig | None = None,
) -> datasets.Dataset:
    """Tokenised sentences with salient spans, cached under ``cache_dir`` by the tagging stage
    (``realm.data.tag_stage``: shards keyed by the file's stamp and the settings; ``stage`` says how many worker
    processes build a missing cache).

    ``exclude`` names a file of sentences held out one by one (one text a line, ``HELDOUT_SENTENCES_FILE``, as the
    real-text study's reachable cloze writes it): they are skipped, and the skip counted and logged
    (``realm.data.sentences.without_sentences``); the file's stamp is part of the cache key."""
    job = sentence_tag_job(path, tokenizer, tagger_cfg, max_query_length, cache_dir, exclude)
    stage = stage or TagStageConfig()
    if tagger_cfg is not None and complete_manifest(job) is None:
        logger.info("no complete tagged cache of %s in %s: tagging it here with %d worker(s); for a large corpus run "
                    "`realm tag` first, so that no rank waits for it", path, job.target, stage.num_workers)  # fmt: skip
    return tag_sentences(job, stage)


def tag_sentences(job: TagJob, stage: TagStageConfig) -> datasets.Dataset:
    """``realm.data.tag_stage.tagged_sentences`` built under a lock beside the cache folder: a second builder of one
    cache (``realm tag`` while a trainer prepares X) is refused with the holder's pid rather than let clean the
    other's shards."""
    lock = job.target.parent / f".{job.target.name}.lock"
    refusal = f"the sentence cache {job.target} is being built by another process"
    return tagged_sentences(job, stage, exclusive_lock(lock, refusal=refusal))


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
