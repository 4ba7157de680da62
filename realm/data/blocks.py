"""Blocks of the knowledge corpus: documents cut into wordpiece blocks, stored as an Arrow dataset.

A block is embedded as ``[CLS] title [SEP] body [SEP]`` in at most ``max_block_length`` (288) wordpieces, so a
document body is cut into pieces of at most ``max_block_length - 3 - len(title_ids)`` wordpieces, at sentence
boundaries where possible. The row number of a block is the block id the index uses.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import shutil
import tempfile
import uuid
from bisect import bisect_left, bisect_right
from itertools import chain, islice
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import datasets
from transformers import PreTrainedTokenizerBase

from realm.core.errors import DataFileError, UserError
from realm.data.blocks_check import check_token_ids, read_saved_blocks
from realm.data.corpus import CorpusConfig, CorpusError, CorpusStats, Document, check_unique_ids, read_documents
from realm.data.sentences import split_sentences
from realm.data.vocab import check_reads_text, tokenizer_fingerprint

logger = logging.getLogger(__name__)

BLOCKS_MANIFEST = "blocks_manifest.json"
"""What a blocks folder was cut with: ``{"tokenizer": name or path, "tokenizer_fingerprint": sha256}``."""


class BlocksTokenizerError(UserError, ValueError):
    """Blocks read with another tokenizer than the one they were cut with (their wordpiece ids mean other words)."""

BLOCK_FEATURES = datasets.Features(
    {
        "uid": datasets.Value("string"),
        "doc_id": datasets.Value("string"),
        "title": datasets.Value("string"),
        "text": datasets.Value("string"),
        "title_ids": datasets.List(datasets.Value("int32")),
        "body_ids": datasets.List(datasets.Value("int32")),
    }
)
"""Columns of a block dataset; ``title_ids`` / ``body_ids`` are wordpieces without special tokens."""


@dataclass(kw_only=True, slots=True)
class BlocksInput:
    """The ``data`` section of a job that reads the knowledge corpus: its vocabulary and its saved blocks."""

    tokenizer: str = ""
    """A tokenizer folder or hub name (``realm vocab`` writes one)."""
    blocks: str = ""
    """A saved blocks dataset (``realm blocks`` writes one)."""


def cut_body(sentence_starts: list[int], word_starts: list[bool], room: int) -> list[tuple[int, int]]:
    """Cuts a tokenized body into wordpiece ranges ``[start, end)`` of at most ``room`` pieces.

    Whole sentences are packed greedily; a sentence longer than ``room`` is cut at the last word start that fits
    (mid-word only when a single word is longer than ``room``), and its tail may share a block with what follows.

    Args:
        sentence_starts: Wordpiece index where each sentence starts, ascending, beginning with 0.
        word_starts: For each wordpiece, whether it starts a word (cutting there keeps ``tokenize(text) == ids``).
        room: Wordpieces available for the body of one block.
    """
    boundaries = [*sentence_starts, len(word_starts)]
    blocks: list[tuple[int, int]] = []
    start = 0
    for end in boundaries[1:]:
        while end - start > room:
            # The sentence ending at `end` does not fit: close the block at the last sentence boundary that
            # fits, or, when the block is a single over-long sentence, at the last word start that fits.
            cut = boundaries[bisect_right(boundaries, start + room) - 1]
            if cut <= start:
                cut = next((j for j in range(start + room, start, -1) if word_starts[j]), start + room)
            blocks.append((start, cut))
            start = cut
    if start < len(word_starts):
        blocks.append((start, len(word_starts)))
    return blocks


def _blocks_of_batch(
    docs: list[Document],
    tokenizer: PreTrainedTokenizerBase,
    max_block_length: int,
    max_title_length: int,
    stats: CorpusStats,
) -> Iterator[dict[str, Any]]:
    titles = tokenizer([d.title for d in docs], add_special_tokens=False, verbose=False)["input_ids"]
    # verbose=False: bodies are longer than the model's max length by design, they are cut below.
    bodies = tokenizer([d.text for d in docs], add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    for k, doc in enumerate(docs):
        ids, offsets, word_ids = bodies["input_ids"][k], bodies["offset_mapping"][k], bodies.word_ids(k)
        if not ids:
            stats.num_empty += 1
            continue
        title_ids = titles[k][:max_title_length]
        # A sentence starts at the first wordpiece at or after its first character (pieces never start on
        # whitespace, and the sentences cover every other character).
        piece_starts = [a for a, _ in offsets]
        sentence_starts = {bisect_left(piece_starts, start) for start, _ in split_sentences(doc.text)}
        sentence_starts = sorted(({0} | sentence_starts) - {len(ids)})
        word_starts = [j == 0 or word_ids[j] != word_ids[j - 1] for j in range(len(ids))]
        room = max_block_length - 3 - len(title_ids)
        for start, end in cut_body(sentence_starts, word_starts, room):
            text = doc.text[offsets[start][0] : offsets[end - 1][1]]
            stats.num_blocks += 1
            yield {
                "uid": block_uid(doc.title, text),
                "doc_id": doc.id,
                "title": doc.title,
                "text": text,
                "title_ids": title_ids,
                "body_ids": ids[start:end],
            }
        stats.num_documents += 1


def _generate_blocks(
    docs: Iterable[Document],
    tokenizer: PreTrainedTokenizerBase,
    max_block_length: int,
    max_title_length: int,
    batch_size: int,
    stats: CorpusStats,
) -> Iterator[dict[str, Any]]:
    batch: list[Document] = []
    for doc in docs:
        if not doc.text.strip():
            stats.num_empty += 1
            continue
        batch.append(doc)
        if len(batch) == batch_size:
            yield from _blocks_of_batch(batch, tokenizer, max_block_length, max_title_length, stats)
            batch = []
    if batch:
        yield from _blocks_of_batch(batch, tokenizer, max_block_length, max_title_length, stats)


def block_uid(title: str, body: str) -> str:
    """The original REALM block uid: SHA-1 hex of ``"{title} <sep> {body}"``; queries carry their source's."""
    return hashlib.sha1(f"{title} <sep> {body}".encode("utf-8")).hexdigest()


def build_blocks(
    docs: Iterable[Document],
    tokenizer: PreTrainedTokenizerBase,
    max_block_length: int,
    *,
    max_title_length: int = 32,
    batch_size: int = 256,
    cache_dir: str | Path | None = None,
    stats: CorpusStats | None = None,
) -> datasets.Dataset:
    """Cuts documents into blocks that fit ``[CLS] title [SEP] body [SEP]`` in ``max_block_length`` wordpieces.

    Every block satisfies ``len(title_ids) + len(body_ids) + 3 <= max_block_length``, with the title cut to
    ``max_title_length`` wordpieces. Bodies break at sentence boundaries where possible and at word starts
    otherwise (see ``cut_body``); ``text`` is the exact substring of the document the ``body_ids`` came from.
    Rows are written to Arrow files as they are produced (``Dataset.from_generator``), so the corpus never has
    to fit in memory; the row number is the block id the index uses, and the order is that of ``docs``.

    Args:
        docs: Documents, e.g. from ``read_documents``. Empty ones are skipped and counted.
        tokenizer: A fast tokenizer (offsets and word ids are needed).
        max_block_length: Wordpieces of an embedded block, specials included (288 in REALM).
        max_title_length: Title wordpieces kept.
        batch_size: Documents tokenized together.
        cache_dir: Where the Arrow files go (default: the ``datasets`` cache).
        stats: Updated in place with ``num_empty``, ``num_documents`` and ``num_blocks``.

    Returns:
        A dataset with the columns of ``BLOCK_FEATURES``: uid, doc_id, title, text (str) and title_ids,
        body_ids (lists of int32 wordpieces without specials).
    """
    if max_title_length < 0 or max_block_length < max_title_length + 4:
        raise ValueError(
            f"max_block_length={max_block_length} leaves no body wordpiece with max_title_length={max_title_length}"
        )
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("build_blocks needs a fast tokenizer (offset mappings)")
    stats = stats if stats is not None else CorpusStats()
    # note: the first batch is read ahead (and tokenized twice), so a vocabulary of other text stops before any block
    docs = iter(docs)
    sample = list(islice(docs, batch_size))
    check_reads_text(tokenizer, [doc.text for doc in sample], "the corpus")
    generate = functools.partial(
        _generate_blocks, chain(sample, docs), tokenizer, max_block_length, max_title_length, batch_size, stats
    )
    try:
        # note: a fresh fingerprint, because `docs` may be a one-shot iterator that cannot be hashed; a cache hit
        # would also skip the generator and leave `stats` empty. functools.partial keeps datasets from sharding
        # list-valued gen_kwargs.
        blocks = datasets.Dataset.from_generator(
            generate,
            features=BLOCK_FEATURES,
            cache_dir=None if cache_dir is None else str(cache_dir),
            fingerprint=uuid.uuid4().hex,
        )
    except datasets.exceptions.DatasetGenerationError as err:
        # Surface our own errors (bad line, missing file) rather than datasets' generic wrapper.
        if isinstance(err.__cause__, (DataFileError, OSError)):
            raise err.__cause__ from None
        raise
    log = logger.warning if stats.num_empty else logger.info
    log(
        "cut %d documents into %d blocks of at most %d wordpieces; skipped %d empty documents",
        stats.num_documents,
        stats.num_blocks,
        max_block_length,
        stats.num_empty,
    )
    return blocks


def save_blocks(
    blocks: datasets.Dataset,
    path: str | Path,
    *,
    stats: CorpusStats | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
    overwrite: bool = False,
) -> Path:
    """Saves blocks with ``save_to_disk`` into a staging folder renamed to ``path`` when complete.

    ``stats`` (if given) is written next to the Arrow files as ``corpus_stats.json``, and the fingerprint of the
    ``tokenizer`` they were cut with (if given) as ``BLOCKS_MANIFEST``, which ``check_blocks_tokenizer`` reads. An
    existing ``path`` is an error unless ``overwrite``.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"blocks folder already exists: {path} (pass overwrite=True to replace it)")
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    blocks.save_to_disk(str(staging))
    if stats is not None:
        (staging / "corpus_stats.json").write_text(json.dumps(stats.to_dict(), indent=2))
    if tokenizer is not None:
        # note: a local folder is recorded absolute, so a mismatch error names it from any directory
        name = tokenizer.name_or_path
        name = str(Path(name).resolve()) if name and Path(name).exists() else name
        manifest = {"tokenizer": name, "tokenizer_fingerprint": tokenizer_fingerprint(tokenizer)}
        (staging / BLOCKS_MANIFEST).write_text(json.dumps(manifest, indent=2))
    if path.exists():
        shutil.rmtree(path)
    staging.rename(path)
    return path


def load_blocks(path: str | Path, tokenizer: PreTrainedTokenizerBase | None = None) -> datasets.Dataset:
    """Loads blocks saved by ``save_blocks`` (memory-mapped Arrow) and checks that they read whole, their columns and,
    given the ``tokenizer``, that every wordpiece id is in its vocabulary (``realm.data.blocks_check``)."""
    path = Path(path)
    if not (path / "dataset_info.json").is_file():
        raise FileNotFoundError(f"no saved blocks at {path} (build them with build_blocks_from_config)")
    blocks = read_saved_blocks(path)
    missing = [name for name in BLOCK_FEATURES if name not in blocks.column_names]
    if not isinstance(blocks, datasets.Dataset) or missing:
        raise CorpusError(f"{path}: not a block dataset (missing columns {missing})")
    if tokenizer is not None:
        vocabulary = f"tokenizer {tokenizer.name_or_path or '(unnamed)'}"
        check_token_ids(blocks, ("title_ids", "body_ids"), len(tokenizer), str(path), vocabulary)
    return blocks


_UNCHECKED_BLOCKS: set[Path] = set()
"""Blocks folders without a tokenizer fingerprint already warned about (one warning a folder and process)."""


def check_blocks_tokenizer(path: str | Path, tokenizer: PreTrainedTokenizerBase) -> None:
    """Raises ``BlocksTokenizerError`` unless the blocks at ``path`` were cut with a tokenizer of the same
    vocabulary and normalization as ``tokenizer`` (``tokenizer_fingerprint``); otherwise their wordpiece ids would
    silently be read as other words. Then loads them once with ``load_blocks(path, tokenizer)``: every id read back
    must be in the vocabulary (a ``CorpusError`` naming the file otherwise, as for an Arrow file cut short).

    Blocks saved before the fingerprint was recorded cannot be checked: a warning, once a folder, and no error.
    """
    path = Path(path)
    if not (path / "dataset_info.json").is_file():
        return  # note: not saved blocks at all, which load_blocks reports; so the check may come before it
    name = tokenizer.name_or_path or "the tokenizer in use"
    try:
        manifest = json.loads((path / BLOCKS_MANIFEST).read_text())
    except FileNotFoundError:
        manifest = {}
    except ValueError as err:
        raise CorpusError(f"{path / BLOCKS_MANIFEST}: not valid JSON ({err})") from None
    recorded = manifest.get("tokenizer_fingerprint") if isinstance(manifest, dict) else None
    if recorded is None:
        if path.resolve() not in _UNCHECKED_BLOCKS:
            _UNCHECKED_BLOCKS.add(path.resolve())
            logger.warning(
                "blocks %s have no %s (cut by an older `realm blocks`), so nothing checks that they were cut with "
                "tokenizer %s; cut them again to have it checked",
                path,
                BLOCKS_MANIFEST,
                name,
            )
    elif recorded != (actual := tokenizer_fingerprint(tokenizer)):
        raise BlocksTokenizerError(
            f"blocks {path} were cut with tokenizer {manifest.get('tokenizer') or '(unnamed)'} (fingerprint "
            f"{recorded[:12]}), not with {name} (fingerprint {actual[:12]}), so their wordpiece ids would be read as "
            f"other words: cut them again with `realm blocks --tokenizer {name}`, or use the tokenizer they were cut "
            "with"
        )
    load_blocks(path, tokenizer)


def build_blocks_from_config(cfg: CorpusConfig, tokenizer: PreTrainedTokenizerBase, out_dir: str | Path) -> Path:
    """Reads the corpus ``cfg`` describes, cuts it into blocks and saves them to ``out_dir`` (replacing it), with the
    tokenizer's fingerprint. A repeated document id is an error (``check_unique_ids``).

    The Arrow files are generated in a temporary folder beside ``out_dir``, so only the saved copy remains.
    """
    out_dir = Path(out_dir)
    # note: before anything is written, so a corpus with a repeated id leaves no folder behind
    check_unique_ids(cfg)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    stats = CorpusStats()
    with tempfile.TemporaryDirectory(prefix=f".{out_dir.name}.cache-", dir=out_dir.parent) as cache_dir:
        try:
            blocks = build_blocks(
                read_documents(cfg, stats),
                tokenizer,
                cfg.max_block_length,
                max_title_length=cfg.max_title_length,
                cache_dir=cache_dir,
                stats=stats,
            )
        except ValueError as err:
            if isinstance(err, UserError) or stats.num_documents:
                raise
            # note: datasets refuses to build an empty table ("corresponds to no data"); say why it is empty
            raise DataFileError(
                f"{cfg.path}: no documents to cut into blocks ({stats.num_records} records read, "
                f"{stats.num_malformed} malformed and {stats.num_empty} empty skipped)"
            ) from None
        save_blocks(blocks, out_dir, stats=stats, tokenizer=tokenizer, overwrite=True)
        del blocks
    return out_dir
