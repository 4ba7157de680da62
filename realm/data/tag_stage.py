"""The tagging stage: the pre-training sentences X tokenised and tagged in shards over worker processes, cached and
resumable (``realm tag`` runs it ahead of a job; ``realm.pretrain.data.prepared_sentences`` reads it, and builds it
when it is missing).

spaCy tags about 540 sentences/s on one core, so 100M sentences take two days in one process, while the other ranks
of a job would wait at a barrier far past any process-group timeout. Here the sentences file is cut into shards of
``shard_size`` lines; each shard is read, tokenised and tagged by ``realm.data.sentences.prepare_sentences`` in a
worker process (``spawn``; each worker loads its own tagger once) and published by rename as soon as it is done, so
a killed build resumes from the shards it published. The rows come back in file order: the shards concatenated are
row for row what ``prepare_sentences`` gives on the whole file.

A cache folder (``CACHE/<key>``, the key as ``prepared_sentences`` names it) holds::

    manifest.json           written last: source stamp, settings, the shards and their rows. The cache is complete
                            when it exists and its stamp and settings are those of the sentences asked for.
    shard-00000/            a saved ``datasets.Dataset`` of lines [first_line, first_line + num_lines) of the file,
        shard.json          and its own small manifest (stamp, settings, line range, rows)
    .tmp-shard-00000-<hex>/ a shard being written (what a kill leaves; the next build removes it)

The settings are what decides the rows: the tokenizer's fingerprint, ``max_query_length``, the tagger (kind and
spaCy model) and the stamp of the exclusion list. The worker count and the shard size are not: any number of
workers gives the same rows, and a cache built with another shard size is complete all the same (a rebuild with a
new size re-tags only shards whose line range changed).

Cost with N workers and L lines: time is one scan of the file in the calling process (byte offsets of the shards'
first lines; ~1M lines/s), plus L / (N x one process's tagging rate), plus a start-up per worker (imports and the
tagger: seconds for spaCy) and a small per-shard overhead (a scratch copy of its lines read back as Arrow), so it
falls as 1/N until N reaches the free cores. Memory does not grow with L: the caller holds one offset per shard and
then the memory-mapped result; each worker holds its tokenizer, its tagger (spaCy's small model: a few hundred MB)
and one batch of its shard (shards are Arrow files on disk), so peak RSS is about the caller plus N x (a worker's
imports + its tagger). Disk: the shards, plus per running worker a scratch copy of its shard (lines and Arrow).
One process builds a cache at a time (the caller's lock); set ``OMP_NUM_THREADS=1`` so N spaCy workers do not each
start a thread per core.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import multiprocessing
import os
import re
import shutil
import time
import uuid
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import datasets
from transformers import PreTrainedTokenizerBase

from realm.core.atomic import disk_writes, fsync_path, write_text_atomic
from realm.core.checks import Problems
from realm.core.errors import DataFileError, RunError
from realm.data.articles import read_article_list
from realm.data.sentences import SENTENCE_FEATURES, load_jsonl_dataset, prepare_sentences
from realm.data.tagging import TaggingConfig, build_tagger
from realm.data.vocab import tokenizer_fingerprint

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
"""The top-level manifest of a cache folder, written last."""
SHARD_MANIFEST = "shard.json"
"""A published shard's own manifest, inside its folder."""
FORMAT = 1
"""Layout version of a cache folder; another one is rebuilt."""


@dataclass(kw_only=True, slots=True)
class TagStageConfig:
    """How the tagging stage spreads the sentences over processes (the rows do not depend on either field)."""

    num_workers: int = 1
    """Worker processes, each with its own tokenizer and tagger; 1 tags in the calling process (no spawn)."""
    shard_size: int = 100_000
    """Lines of the sentences file per shard: the unit of work and of publication (what a kill can lose)."""

    def __post_init__(self) -> None:
        problems = Problems()
        if self.num_workers < 1:
            problems.add(f"num_workers must be at least 1, got {self.num_workers}")
        if self.shard_size < 1:
            problems.add(f"shard_size must be at least 1, got {self.shard_size}")
        problems.raise_if_any()


@dataclass(frozen=True, slots=True)
class TagJob:
    """Which sentences to prepare, how, and the cache folder that holds them."""

    source: Path
    """jsonl of sentences (``realm.data.sentences.load_jsonl_dataset``'s format)."""
    target: Path
    """The cache folder of these sentences and settings."""
    tokenizer: PreTrainedTokenizerBase
    tagger: TaggingConfig | None
    """None leaves salient spans empty (files with gold spans)."""
    max_query_length: int
    exclude: str = ""
    """File of sentences never to prepare, one text a line ("" for none)."""


@dataclass(frozen=True, slots=True)
class Shard:
    """Lines ``[first_line, first_line + num_lines)`` of the source (1-based), bytes ``[start, end)``."""

    index: int
    first_line: int
    num_lines: int
    start: int
    end: int
    num_records: int
    """Non-blank lines."""

    @property
    def name(self) -> str:
        return f"shard-{self.index:05d}"


def file_stamp(path: str | Path) -> str:
    """What changes when a file is replaced or edited: its resolved path, size and modification time."""
    path = Path(path)
    stat = path.stat()
    return f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"


def tag_settings(job: TagJob) -> dict[str, Any]:
    """What decides the prepared rows besides the source file (see the module docstring)."""
    tagger = None if job.tagger is None else {"kind": job.tagger.kind, "spacy_model": job.tagger.spacy_model}
    if tagger is not None and job.tagger.kind != "spacy":
        tagger.pop("spacy_model")
    return {
        "tokenizer": tokenizer_fingerprint(job.tokenizer),
        "max_query_length": job.max_query_length,
        "tagger": tagger,
        "exclude": file_stamp(job.exclude) if job.exclude else "",
    }


def complete_manifest(job: TagJob) -> dict[str, Any] | None:
    """The cache's manifest when it is complete for ``job`` (stamp and settings match, every shard is there)."""
    manifest = _read_json(job.target / MANIFEST)
    if manifest is None or manifest.get("format") != FORMAT:
        return None
    if manifest.get("source") != file_stamp(job.source) or manifest.get("settings") != tag_settings(job):
        return None
    return manifest if all((job.target / s["name"]).is_dir() for s in manifest["shards"]) else None


def tagged_sentences(
    job: TagJob, stage: TagStageConfig, guard: contextlib.AbstractContextManager | None = None
) -> datasets.Dataset:
    """The prepared sentences of ``job``: read from its cache when complete, else tagged now (the missing shards,
    ``stage.num_workers`` processes) and published, with ``guard`` held (the caller's lock: one builder per cache,
    since a build removes what it does not recognise in the folder). Columns and row order are
    ``prepare_sentences``'s."""
    manifest = complete_manifest(job)
    if manifest is None:
        with guard or contextlib.nullcontext():
            manifest = complete_manifest(job) or _build(job, stage)
    shards = [datasets.load_from_disk(str(job.target / s["name"])) for s in manifest["shards"]]
    return shards[0] if len(shards) == 1 else datasets.concatenate_datasets(shards)


def plan_shards(source: Path, shard_size: int) -> list[Shard]:
    """The shards of ``source``: one pass over its bytes, no JSON parsing, one ``Shard`` held per shard.

    Raises ``DataFileError`` when the file has no non-blank line."""
    shards: list[Shard] = []
    first, start, offset, records, number = 1, 0, 0, 0, 0
    with source.open("rb") as lines:
        for number, raw in enumerate(lines, start=1):
            offset += len(raw)
            records += bool(raw.strip())
            if number - first + 1 == shard_size:
                shards.append(Shard(index=len(shards), first_line=first, num_lines=shard_size, start=start,
                                    end=offset, num_records=records))  # fmt: skip
                first, start, records = number + 1, offset, 0
    if number >= first:
        shards.append(Shard(index=len(shards), first_line=first, num_lines=number - first + 1, start=start, end=offset,
                            num_records=records))  # fmt: skip
    if not any(shard.num_records for shard in shards):
        raise DataFileError(f"{source}: no records")
    return shards


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _shard_record(shard: Shard, source: str, settings: dict[str, Any]) -> dict[str, Any]:
    """What a published shard's ``shard.json`` must say for the shard to be reused (its ``num_rows`` aside)."""
    return {"format": FORMAT, "source": source, "settings": settings, "first_line": shard.first_line,
            "num_lines": shard.num_lines}  # fmt: skip


def _build(job: TagJob, stage: TagStageConfig) -> dict[str, Any]:
    """Tags the shards not yet published, then writes the manifest (last). Returns it."""
    source, settings = file_stamp(job.source), tag_settings(job)
    started = time.perf_counter()
    shards = plan_shards(job.source, stage.shard_size)
    with disk_writes(job.target):
        job.target.mkdir(parents=True, exist_ok=True)
        rows = _kept_shards(job.target, shards, source, settings)
    todo = [shard for shard in shards if shard.name not in rows]
    num_workers = min(stage.num_workers, len(todo)) or 1
    logger.info("tagging %s: %d lines in %d shards (%d published before), %d worker(s) -> %s", job.source,
                shards[-1].first_line + shards[-1].num_lines - 1, len(shards), len(rows), num_workers,
                job.target)  # fmt: skip
    for done, (shard, num_rows) in enumerate(_tag_shards(job, todo, num_workers, source, settings), start=1):
        rows[shard.name] = num_rows
        elapsed = time.perf_counter() - started
        logger.info("tagged %s (%d rows): %d of %d shards left, %.0f s so far", shard.name, num_rows,
                    len(todo) - done, len(shards), elapsed)  # fmt: skip
    entries = [{"name": s.name, "first_line": s.first_line, "num_lines": s.num_lines, "num_rows": rows[s.name]}
               for s in shards]  # fmt: skip
    manifest = {"format": FORMAT, "source": source, "settings": settings, "shard_size": stage.shard_size,
                "num_rows": sum(rows.values()), "shards": entries}  # fmt: skip
    write_text_atomic(job.target / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    logger.info("tagged %s: %d rows in %d shards, %.1f s (%d re-tagged)", job.source, manifest["num_rows"],
                len(shards), time.perf_counter() - started, len(todo))  # fmt: skip
    return manifest


def _kept_shards(target: Path, shards: list[Shard], source: str, settings: dict[str, Any]) -> dict[str, int]:
    """``{name: rows}`` of the published shards still valid; everything else in ``target`` (a stale manifest, shards
    of another source, settings or line range, a kill's temporary folders, an older layout) is removed first."""
    (target / MANIFEST).unlink(missing_ok=True)  # note: first, so no crash below leaves a manifest of other shards
    planned = {shard.name: shard for shard in shards}
    kept: dict[str, int] = {}
    for entry in sorted(target.iterdir()):
        shard = planned.get(entry.name)
        record = _read_json(entry / SHARD_MANIFEST) if shard is not None and entry.is_dir() else None
        if record is not None and {k: record.get(k) for k in ("format", "source", "settings", "first_line",
                                                             "num_lines")} == _shard_record(shard, source, settings):
            kept[entry.name] = int(record["num_rows"])
        elif entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    return kept


@contextlib.contextmanager
def _quiet_progress() -> Iterator[None]:
    """No ``datasets`` progress bars inside (one per shard would bury the log's per-shard lines)."""
    was_enabled = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if was_enabled:
            datasets.enable_progress_bars()


def _tag_shards(
    job: TagJob, shards: list[Shard], num_workers: int, source: str, settings: dict[str, Any]
) -> Iterator[tuple[Shard, int]]:
    """``(shard, rows)`` as each shard is published: in this process for one worker, else in ``num_workers`` spawned
    processes (fork would copy a parent's threads and CUDA state)."""
    if not shards:
        return
    if num_workers == 1:
        tag = ShardTagger(job, source, settings)
        with _quiet_progress():
            for shard in shards:
                yield shard, tag(shard)
        return
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(num_workers, mp_context=context, initializer=_start_worker,
                             initargs=(job, source, settings)) as pool:  # fmt: skip
        futures = {pool.submit(_tag_in_worker, shard): shard for shard in shards}
        try:
            for future in as_completed(futures):
                try:
                    result = future.result()
                except BrokenProcessPool as err:
                    raise RunError(f"a tagging worker of {job.target} died (out of memory? fewer workers, "
                                   "data.tag_stage.num_workers); a rerun keeps the shards published") from err
                yield futures[future], result
        except BaseException:
            # note: the shards being tagged finish and are published (a rerun keeps them); the rest never start
            for future in futures:
                future.cancel()
            raise


_WORKER: list[ShardTagger | BaseException] = []
"""A worker process's ``ShardTagger`` built once by ``_start_worker``, or what building it raised."""


def _start_worker(job: TagJob, source: str, settings: dict[str, Any]) -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # note: N workers already use N cores
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s tag worker %(process)d %(levelname)s %(message)s")
    datasets.disable_progress_bars()
    try:
        _WORKER.append(ShardTagger(job, source, settings))
    except Exception as err:  # noqa: BLE001 - kept for the first shard: an initializer's error breaks the pool
        _WORKER.append(err)  # with no message, a task's error reaches the caller as it is (spaCy missing, ...)


def _tag_in_worker(shard: Shard) -> int:
    if isinstance(_WORKER[0], BaseException):
        raise _WORKER[0]
    return _WORKER[0](shard)


class ShardTagger:
    """Prepares and publishes shards of one job (one per worker process: it holds the tagger)."""

    def __init__(self, job: TagJob, source: str, settings: dict[str, Any]) -> None:
        self.job, self.source, self.settings = job, source, settings
        self.tagger = build_tagger(job.tagger) if job.tagger is not None else None
        self.excluded = read_article_list(job.exclude) if job.exclude else set()
        # note: named by the settings, so datasets need not hash the tagger (slow for spaCy)
        self.fingerprint = hashlib.sha1(json.dumps([source, settings], sort_keys=True).encode()).hexdigest()[:16]

    def __call__(self, shard: Shard) -> int:
        """Prepares ``shard``, publishes it as ``target/shard-NNNNN`` and returns its rows."""
        target = self.job.target
        scratch = target / f".tmp-{shard.name}-{uuid.uuid4().hex}"
        try:
            with disk_writes(scratch, opaque_writer=True):
                scratch.mkdir()
                rows = self._prepare(shard, scratch)
                out = scratch / "out"
                rows.save_to_disk(str(out))
                record = {**_shard_record(shard, self.source, self.settings), "num_rows": len(rows)}
                (out / SHARD_MANIFEST).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
                os.rename(out, target / shard.name)
                fsync_path(target)
            return len(rows)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _prepare(self, shard: Shard, scratch: Path) -> datasets.Dataset:
        if shard.num_records == 0:  # note: blank lines only; the json reader would call that an error
            return datasets.Dataset.from_dict({name: [] for name in SENTENCE_FEATURES}, features=SENTENCE_FEATURES)
        lines = scratch / "lines.jsonl"
        with self.job.source.open("rb") as src, lines.open("wb") as dst:
            src.seek(shard.start)
            left = shard.end - shard.start
            while left > 0:
                chunk = src.read(min(left, 1 << 24))
                if not chunk:
                    raise DataFileError(f"{self.job.source}: changed while it was being tagged (shorter than planned)")
                dst.write(chunk)
                left -= len(chunk)
        try:
            records = load_jsonl_dataset(lines, cache_dir=scratch / "hf")
        except DataFileError as err:
            raise DataFileError(self._located(str(err), lines, shard)) from None
        return prepare_sentences(records, self.job.tokenizer, self.tagger, self.job.max_query_length,
                                 fingerprint=f"tag-{shard.name}-{self.fingerprint}", exclude=self.excluded)  # fmt: skip

    def _located(self, message: str, lines: Path, shard: Shard) -> str:
        """``message`` naming the line of the source file rather than of the shard's scratch copy."""
        match = re.match(rf"{re.escape(str(lines))}:(\d+)", message)
        if match:
            return f"{self.job.source}:{shard.first_line + int(match.group(1)) - 1}{message[match.end():]}"
        last = shard.first_line + shard.num_lines - 1
        return message.replace(str(lines), f"{self.job.source} (lines {shard.first_line}-{last})")
