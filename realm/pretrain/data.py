"""Pre-training data: the masked-sentence stream and its loader (batch order: ``realm.training.sampler``).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path

import datasets
from torch.utils.data import DataLoader

from realm.data.articles import read_article_list
from realm.data.masking import MASKING_MODES, MaskingMode
from realm.data.packing import SpecialIds
from realm.data.sentences import load_jsonl_dataset, prepare_sentences
from realm.data.tagging import TaggingConfig, build_tagger
from realm.pretrain.batch import PretrainCollator
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
    cache_dir: str = ""
    """Where prepared (tokenised + tagged) sentences are cached; default ``RUN/data``."""

    def __post_init__(self) -> None:
        if self.masking not in MASKING_MODES or self.masking == "gold":
            raise ValueError(f"masking must be salient, random_span or random_token, got {self.masking!r}")


def prepared_sentences(
    path: str, tokenizer, tagger_cfg: TaggingConfig | None, max_query_length: int, cache_dir: Path, exclude: str = ""
) -> datasets.Dataset:
    """Tokenised sentences with salient spans, cached under ``cache_dir`` keyed by file name and settings.

    ``exclude`` names a file of sentences held out one by one (one text a line, ``HELDOUT_SENTENCES_FILE``, as
    ``realm.pretrain.reachable_cloze`` writes it): they are skipped, and the skip counted and logged
    (``realm.data.sentences.without_sentences``); the file's stamp is part of the cache key."""
    source = Path(path)
    key = f"{source.stem}-q{max_query_length}-{tagger_cfg.kind if tagger_cfg else 'gold'}"
    stamp = f"{source.resolve()}:{source.stat().st_size}:{source.stat().st_mtime_ns}"
    excluded: set[str] = set()
    if exclude:
        listed = Path(exclude)
        excluded = read_article_list(listed)  # note: the article list's format, one text a line
        key += "-x" + hashlib.sha1(str(listed.resolve()).encode("utf-8")).hexdigest()[:8]
        stamp += f"|{listed.resolve()}:{listed.stat().st_size}:{listed.stat().st_mtime_ns}"
    target = cache_dir / key
    if (target / "realm_source.txt").is_file() and (target / "realm_source.txt").read_text() == stamp:
        return datasets.load_from_disk(str(target))
    tagger = build_tagger(tagger_cfg) if tagger_cfg else None
    # note: the json builder cache goes under the run too, not under ~/.cache
    ds = prepare_sentences(load_jsonl_dataset(path, cache_dir=cache_dir / "hf"), tokenizer, tagger, max_query_length,
                           exclude=excluded)  # fmt: skip
    ds.save_to_disk(str(target))
    (target / "realm_source.txt").write_text(stamp)
    return datasets.load_from_disk(str(target))


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
