"""The knowledge corpus Z: documents read from jsonl, DPR tsv or HF datasets (``realm.data.blocks`` cuts them into blocks).

Nothing is dropped silently: malformed records raise ``CorpusError`` naming ``file:line`` (or are skipped and
counted with ``skip_malformed``), empty documents are skipped and counted, and the counts are logged. Document ids
must be unique (``check_unique_ids``).
"""

from __future__ import annotations

import functools
import hashlib
import typing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator, Literal

import datasets
import numpy as np

from realm.core.checks import Problems
from realm.core.errors import DataFileError
from realm.data.jsonl import iter_json_object, iter_jsonl
from realm.data.malformed import existing_file, reject, report
from realm.data.tsv import iter_tsv


CorpusFormat = Literal["jsonl", "json_object", "dpr_tsv", "hf", "hf_disk"]


class CorpusError(DataFileError):
    """A corpus or data file that cannot be read as documented; the message names the file and line."""


@dataclass(slots=True)
class Document:
    """One corpus document before it is cut into blocks."""

    id: str
    title: str
    text: str
    where: str = field(default="", compare=False)
    """Where the record is (``file:line`` or ``name row N``), for errors about it."""


@dataclass(slots=True)
class CorpusStats:
    """What reading and blocking did, so that nothing is dropped without being counted.

    Readers fill the first two counts, ``build_blocks`` the last three; one object can be passed to both.
    """

    num_records: int = 0
    """Well-formed records a reader passed on (empty ones included)."""
    num_malformed: int = 0
    """Records a reader skipped because they could not be parsed (only with ``skip_malformed``)."""
    num_empty: int = 0
    """Documents ``build_blocks`` skipped because their text is empty after stripping (or has no wordpieces)."""
    num_documents: int = 0
    """Documents cut into blocks."""
    num_blocks: int = 0
    """Blocks produced."""

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(kw_only=True, slots=True)
class CorpusConfig:
    """Where the knowledge corpus comes from and how it is cut into blocks."""

    path: str = ""
    """A jsonl or tsv file, a folder written by ``Dataset.save_to_disk`` (hf_disk), or a hub dataset name (hf)."""
    format: CorpusFormat = "jsonl"
    """One of jsonl, json_object (one object mapping each document id to its record, e.g. the Wikipedia Vital
    summaries with ``text_field: extract``), dpr_tsv (DPR's ``psgs_w100.tsv``), hf (``datasets.load_dataset``),
    hf_disk (``load_from_disk``)."""
    id_field: str = "id"
    """Field or column with the document id (hf/hf_disk fall back to the row number if the column is absent)."""
    title_field: str | None = "title"
    """Field with the title; null takes the title from the first line of the text field, without its quotes
    (FlashRAG's wiki18_100w layout ``{"id", "contents": "\\"Title\\"\\nbody"}``, e.g. with ``text_field:
    contents``); a record whose text lacks that title line (no newline, or a blank first line) is then malformed.
    Ignored for dpr_tsv."""
    text_field: str = "text"
    """Field with the document text (``contents`` for FlashRAG files). Ignored for dpr_tsv."""
    hf_config: str | None = None
    """Configuration name for hub datasets, e.g. ``20231101.en`` for ``wikimedia/wikipedia``."""
    hf_split: str = "train"
    """Split to read for hf and (when the folder holds a DatasetDict) hf_disk."""
    skip_malformed: bool = False
    """Skip and count malformed records instead of raising ``CorpusError``."""
    max_block_length: int = 288
    """Wordpieces of ``[CLS] title [SEP] body [SEP]`` (288 in REALM); keep equal to the retriever's."""
    max_title_length: int = 32
    """Title wordpieces kept in a block; longer titles are truncated."""

    def __post_init__(self) -> None:
        problems = Problems()
        if self.format not in typing.get_args(CorpusFormat):
            problems.add(f"format must be one of {', '.join(typing.get_args(CorpusFormat))}, got {self.format!r}")
        if self.max_title_length < 0:
            problems.add(f"max_title_length must be >= 0, got {self.max_title_length}")
        if self.max_block_length < self.max_title_length + 4:
            problems.add(
                f"max_block_length={self.max_block_length} leaves no body wordpiece after [CLS]/[SEP]/[SEP] and "
                f"a title of max_title_length={self.max_title_length}"
            )
        if not self.text_field or not self.id_field or self.title_field == "":
            problems.add("id_field and text_field must be non-empty (title_field may be null)")
        problems.raise_if_any()


# corpus readers refuse with their own error class
_reject = functools.partial(reject, error=CorpusError)


NO_TITLE_LINE = "no title line: with title_field null the text must be a title line, a newline, then the body"


def _title_from_first_line(text: str) -> tuple[str, str] | None:
    """(title without its quotes, body) of FlashRAG's ``"Title"\\nbody``; None when there is no newline or the
    first line is blank, i.e. the record has no title line (malformed, not an empty document)."""
    title, newline, body = text.partition("\n")
    title = title.strip()
    if len(title) >= 2 and title[0] == title[-1] == '"':
        title = title[1:-1]
    return (title, body) if newline and title else None


def read_jsonl(
    path: str | Path,
    *,
    id_field: str = "id",
    title_field: str | None = "title",
    text_field: str = "text",
    skip_malformed: bool = False,
    stats: CorpusStats | None = None,
) -> Iterator[Document]:
    """Documents of a jsonl file, one JSON object per line (blank lines are ignored).

    Args:
        path: The file; checked when called, read lazily.
        id_field: Field holding the id (any JSON scalar; converted to str).
        title_field: Field holding the title, or None to take it from the text's first line (see ``CorpusConfig``).
        text_field: Field holding the text.
        skip_malformed: Count and skip bad lines (invalid JSON, missing field, wrong type) instead of raising.
        stats: Updated in place with the counts.

    Raises:
        FileNotFoundError: No such file.
        CorpusError: A malformed line (``path:line: reason``) when ``skip_malformed`` is False.
    """
    path = existing_file(path, "corpus")
    stats = stats if stats is not None else CorpusStats()
    fields = [id_field, text_field] + ([title_field] if title_field else [])

    def documents() -> Iterator[Document]:
        for where, record in iter_jsonl(path, on_error=lambda w, r: _reject(w, r, skip_malformed, stats)):
            missing = [f for f in fields if f not in record]
            if missing:
                _reject(where, f"missing field(s) {missing}", skip_malformed, stats)
                continue
            text, title, doc_id = record[text_field], record[title_field] if title_field else "", record[id_field]
            if not isinstance(text, str) or not isinstance(title, str) or isinstance(doc_id, (dict, list)):
                _reject(where, "text and title must be strings and the id a scalar", skip_malformed, stats)
                continue
            if title_field is None:
                split = _title_from_first_line(text)
                if split is None:
                    _reject(where, NO_TITLE_LINE, skip_malformed, stats)
                    continue
                title, text = split
            stats.num_records += 1
            yield Document(id=str(doc_id), title=title.strip(), text=text.strip(), where=where)
        report(path, stats)

    return documents()


def read_json_object(
    path: str | Path, *, title_field: str | None = "title", text_field: str = "text", skip_malformed: bool = False,
    stats: CorpusStats | None = None,
) -> Iterator[Document]:
    """Documents of a file holding one JSON object ``{id: {title_field: ..., text_field: ...}, ...}`` (the Wikipedia
    Vital summaries: ``{title: {"title", "extract", "description", "topic"}}``); the key is the document id, and
    ``title_field`` null takes the key as the title too. Errors name ``file:line`` of the entry; other arguments are
    those of ``read_jsonl``."""
    path = existing_file(path, "corpus")
    stats = stats if stats is not None else CorpusStats()

    def documents() -> Iterator[Document]:
        for where, key, record in iter_json_object(path):
            text = record.get(text_field) if isinstance(record, dict) else None
            title = (record.get(title_field) if title_field else key) if isinstance(record, dict) else None
            if not isinstance(text, str) or not isinstance(title, str):
                fields = [text_field] + ([title_field] if title_field else [])
                _reject(where, f"entry {key!r} needs string field(s) {fields}", skip_malformed, stats)
                continue
            stats.num_records += 1
            yield Document(id=key, title=title.strip(), text=text.strip(), where=where)
        report(path, stats)

    return documents()


def read_dpr_tsv(
    path: str | Path, *, skip_malformed: bool = False, stats: CorpusStats | None = None
) -> Iterator[Document]:
    """Documents of DPR's ``psgs_w100.tsv``: a header ``id<TAB>text<TAB>title``, fields quoted as in csv.

    DPR quotes the text and doubles inner quotes (``"Aaron ( or ; ""Ahärôn"") is ..."``); the csv module undoes
    that. Errors name the physical line a row starts on (a quoted field may span several). Arguments and errors are
    those of ``read_jsonl``.
    """
    path = existing_file(path, "corpus")
    stats = stats if stats is not None else CorpusStats()

    def documents() -> Iterator[Document]:
        rows = iter_tsv(path, lambda where, reason: _reject(where, reason, skip_malformed, stats))
        _, header = next(rows, (None, None))
        if header is None or sorted(header) != ["id", "text", "title"]:
            raise CorpusError(f"{path}:1: expected the header id, text, title (tab-separated), got {header}")
        column = {name: i for i, name in enumerate(header)}
        for where, row in rows:
            if len(row) != 3:
                _reject(where, f"expected 3 tab-separated columns, got {len(row)}", skip_malformed, stats)
                continue
            stats.num_records += 1
            title, text = row[column["title"]].strip(), row[column["text"]].strip()
            yield Document(id=row[column["id"]], title=title, text=text, where=where)
        report(path, stats)

    return documents()


def read_hf(
    name_or_path: str,
    *,
    from_disk: bool = False,
    config_name: str | None = None,
    split: str = "train",
    id_field: str = "id",
    title_field: str | None = "title",
    text_field: str = "text",
    skip_malformed: bool = False,
    stats: CorpusStats | None = None,
) -> Iterator[Document]:
    """Documents of a HF dataset: a hub name through ``load_dataset`` (e.g. ``"wikimedia/wikipedia"`` with
    ``config_name="20231101.en"``) or, with ``from_disk``, a folder written by ``save_to_disk``.

    The id is the row number when there is no ``id_field`` column. Rows whose text or title is not a string
    (e.g. null) are malformed and named ``source row N``.
    """
    stats = stats if stats is not None else CorpusStats()
    if from_disk:
        if not Path(name_or_path).is_dir():
            raise FileNotFoundError(f"saved dataset folder not found: {name_or_path}")
        loaded = datasets.load_from_disk(name_or_path)
    else:
        try:
            loaded = datasets.load_dataset(name_or_path, config_name, split=split)
        except Exception as err:  # noqa: BLE001 - the hub raises many types; say which dataset failed.
            raise CorpusError(f"could not load dataset {name_or_path!r} ({config_name}, {split}): {err}") from err
    if isinstance(loaded, datasets.DatasetDict):
        if split not in loaded:
            raise CorpusError(f"{name_or_path}: no split {split!r}; it has {list(loaded)}")
        loaded = loaded[split]
    wanted = [text_field] + ([title_field] if title_field else [])
    missing = [c for c in wanted if c not in loaded.column_names]
    if missing:
        raise CorpusError(f"{name_or_path}: missing column(s) {missing}; it has {loaded.column_names}")
    has_id = id_field in loaded.column_names
    table = loaded.select_columns(wanted + ([id_field] if has_id else []))

    def documents() -> Iterator[Document]:
        row_number = 0
        for batch in table.iter(batch_size=1000):
            for i, text in enumerate(batch[text_field]):
                title = batch[title_field][i] if title_field else ""
                doc_id = str(batch[id_field][i]) if has_id else str(row_number)
                row_number += 1
                where = f"{name_or_path} row {row_number - 1}"
                if not isinstance(text, str) or not isinstance(title, str):
                    _reject(where, "text and title must be strings", skip_malformed, stats)
                    continue
                if title_field is None:
                    split = _title_from_first_line(text)
                    if split is None:
                        _reject(where, NO_TITLE_LINE, skip_malformed, stats)
                        continue
                    title, text = split
                stats.num_records += 1
                yield Document(id=doc_id, title=title.strip(), text=text.strip(), where=where)
        report(name_or_path, stats)

    return documents()


def read_documents(cfg: CorpusConfig, stats: CorpusStats | None = None) -> Iterator[Document]:
    """Documents of the corpus ``cfg`` describes, through the reader its ``format`` names."""
    if not cfg.path:
        raise ValueError("corpus path is not set")
    fields: dict[str, Any] = {"id_field": cfg.id_field, "title_field": cfg.title_field, "text_field": cfg.text_field}
    if cfg.format == "jsonl":
        return read_jsonl(cfg.path, **fields, skip_malformed=cfg.skip_malformed, stats=stats)
    if cfg.format == "dpr_tsv":
        return read_dpr_tsv(cfg.path, skip_malformed=cfg.skip_malformed, stats=stats)
    if cfg.format == "json_object":
        return read_json_object(
            cfg.path, title_field=cfg.title_field, text_field=cfg.text_field, skip_malformed=cfg.skip_malformed,
            stats=stats,
        )  # fmt: skip
    return read_hf(
        cfg.path,
        from_disk=cfg.format == "hf_disk",
        config_name=cfg.hf_config,
        split=cfg.hf_split,
        **fields,
        skip_malformed=cfg.skip_malformed,
        stats=stats,
    )


def _id_hash(doc_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(doc_id.encode("utf-8"), digest_size=8).digest(), "little")


def check_unique_ids(cfg: CorpusConfig) -> None:
    """Raises ``CorpusError`` when two documents of the corpus ``cfg`` describes share an id, naming ``file:line`` of
    the first repeat and of that id's first occurrence, and how many documents repeat an earlier id.

    A block's ``doc_id`` is its one link back to its document, so a repeated id would silently make two documents
    one. One pass keeps 8 bytes a document (a hash of its id: 170 MB for DPR's 21M
    passages, where a set of the ids would take gigabytes); only when a hash repeats is the corpus read again, to
    name the lines and to rule out a hash collision.
    """
    hashes = np.fromiter((_id_hash(d.id) for d in read_documents(cfg, CorpusStats())), dtype=np.uint64)
    order = np.argsort(hashes, kind="stable")
    repeats = np.flatnonzero(hashes[order][1:] == hashes[order][:-1]) + 1
    if not len(repeats):
        return
    # every document whose hash is shared, by position in the corpus; the real ids decide which are repeats
    suspects = set(order[repeats].tolist()) | set(order[repeats - 1].tolist())
    first_where: dict[str, str] = {}
    num_repeats, first_repeat = 0, ""
    for position, doc in enumerate(read_documents(cfg, CorpusStats())):
        if position not in suspects:
            continue
        if doc.id not in first_where:
            first_where[doc.id] = doc.where
            continue
        num_repeats += 1
        first_repeat = first_repeat or f"{doc.where}: document id {doc.id!r} repeats {first_where[doc.id]}"
    if num_repeats:
        raise CorpusError(f"{first_repeat} ({num_repeats} document(s) repeat an earlier id; ids must be unique)")
