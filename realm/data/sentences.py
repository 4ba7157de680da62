"""Pre-training sentences (REALM's X corpus), tokenized once with their salient spans cached as Arrow.

A query is one sentence. Salient-span masking needs, for every sentence, the wordpiece ranges of its named entities
and dates; tagging is by far the slowest step, so it runs once here through ``Dataset.map`` (cached) rather than in
the collator. Every range is in wordpieces of the *truncated* query (``max_query_length - 2`` pieces, leaving room
for [CLS]/[SEP]); a span that truncation cuts is dropped, since masking half an entity leaks the rest of it.

Also here: the rule-based sentence splitter that cuts documents into blocks (``realm.data.corpus``) and blocks into
pre-training sentences.
"""

from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Collection, Sequence

import datasets
import pyarrow.compute as pc
from transformers import PreTrainedTokenizerBase

from realm.core.errors import DataFileError
from realm.data.jsonl import iter_jsonl
from realm.data.vocab import check_reads_text

if TYPE_CHECKING:
    from realm.data.tagging import SpanTagger

logger = logging.getLogger(__name__)

NO_SPAN: tuple[int, int] = (-1, -1)
"""``gold_span`` of a sentence without a gold answer (or whose answer truncation cut)."""

SENTENCE_FEATURES = datasets.Features(
    {
        "input_ids": datasets.List(datasets.Value("int32")),
        "salient_spans": datasets.List(datasets.List(datasets.Value("int32"))),
        "source_uid": datasets.Value("string"),
        "gold_span": datasets.List(datasets.Value("int32")),
        "text": datasets.Value("string"),
    }
)
"""Columns of a prepared sentence dataset; ranges are ``[start, end)`` in wordpieces without specials."""


# A sentence ends at . ! or ? (plus closing quotes/brackets) followed by space and an upper-case letter, a digit or
# an opening quote. Good enough for Wikipedia prose; the paper does not say which splitter it used.
_SENTENCE_END = re.compile(r"""[.!?]+["'\u201d\u2019)\]]*(?=\s+["'\u201c\u2018(\[]?[A-Z0-9])""")
# Initials and dotted abbreviations ("L.", "D.C.", "U.S.", "e.g.") rarely end a sentence in Wikipedia text.
_INITIALS = re.compile(r"(?:[A-Za-z]\.)*[A-Za-z]")
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof st jr sr vs etc no nos inc ltd co corp gen col lt sgt capt gov sen rep rev mt ft fig approx "
    "dept est vol pp jan feb mar apr jun jul aug sep sept oct nov dec".split()
)


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Character spans ``[start, end)`` of the sentences of ``text``, without surrounding whitespace.

    Newlines always end a sentence. Every non-whitespace character lies in exactly one span, in order, so the
    spans partition a tokenized text.
    """
    spans: list[tuple[int, int]] = []

    def add(start: int, end: int) -> None:
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        if start < end:
            spans.append((start, end))

    for line in re.finditer(r"[^\n]+", text):
        start = line.start()
        for match in _SENTENCE_END.finditer(text, line.start(), line.end()):
            words = text[start : match.start()].split()
            last_word = words[-1].lstrip("\"'(\u201c\u2018[") if words else ""
            if _INITIALS.fullmatch(last_word) or last_word.lower() in _ABBREVIATIONS:
                continue
            add(start, match.end())
            start = match.end()
        add(start, line.end())
    return spans


def char_span_to_wordpieces(
    offsets: Sequence[tuple[int, int]], start: int, end: int, limit: int
) -> tuple[int, int] | None:
    """Wordpiece range ``[first, last)`` of the pieces overlapping characters ``[start, end)``.

    Args:
        offsets: Character offsets of the wordpieces (a fast tokenizer's ``offset_mapping``, no special tokens).
        start: First character of the span.
        end: One past its last character.
        limit: Wordpieces kept after truncation; a span reaching past it is cut and gives None.

    Returns:
        The range, or None when no wordpiece overlaps the span or truncation cuts it.
    """
    if start >= end:
        return None
    pieces = [j for j, (a, b) in enumerate(offsets) if a < end and b > start and a < b]
    if not pieces:
        return None
    first, last = pieces[0], pieces[-1] + 1
    return (first, last) if last <= limit else None


def _prepare_batch(
    batch: dict[str, list[Any]], tokenizer: PreTrainedTokenizerBase, tagger: SpanTagger | None, max_tokens: int
) -> dict[str, list[Any]]:
    texts: list[str] = batch["text"]
    # One piece past the limit tells whether a span runs beyond it (offsets are contiguous, so one is enough).
    encoded = tokenizer(
        texts, add_special_tokens=False, truncation=True, max_length=max_tokens + 1, return_offsets_mapping=True
    )
    tagged = tagger.tag(texts) if tagger is not None else [[] for _ in texts]
    if len(tagged) != len(texts):
        raise ValueError(f"tagger returned {len(tagged)} span lists for {len(texts)} texts")
    source_uids = batch.get("source_uid") or [""] * len(texts)
    starts = batch.get("answer_start") or [None] * len(texts)
    ends = batch.get("answer_end") or [None] * len(texts)
    out: dict[str, list[Any]] = {name: [] for name in SENTENCE_FEATURES}
    for i, text in enumerate(texts):
        offsets = encoded["offset_mapping"][i]
        salient = [
            list(r) for s, e, _ in tagged[i] if (r := char_span_to_wordpieces(offsets, s, e, max_tokens)) is not None
        ]
        gold = None
        if starts[i] is not None and ends[i] is not None and 0 <= starts[i] < ends[i]:
            gold = char_span_to_wordpieces(offsets, starts[i], ends[i], max_tokens)
        out["input_ids"].append(encoded["input_ids"][i][:max_tokens])
        out["salient_spans"].append(salient)
        out["source_uid"].append(source_uids[i] or "")
        out["gold_span"].append(list(gold or NO_SPAN))
        out["text"].append(text)
    return out


def without_sentences(records: datasets.Dataset, excluded: Collection[str], what: str) -> datasets.Dataset:
    """``records`` (a ``text`` column) less the rows whose text, stripped, is one of ``excluded``: sentences held out
    one by one (e.g. the real-text study's reachable cloze items) that no training stage may read. The skip is counted
    and logged for ``what``. Matching is by text, not by source block, so a copy of a held-out sentence elsewhere in the
    corpus is skipped too (a copy trained on would leak the item as surely as the original)."""
    if not excluded:
        return records
    listed = frozenset(text.strip() for text in excluded)
    kept = records.filter(lambda batch: [t.strip() not in listed for t in batch["text"]], batched=True,
                          desc="Skipping held-out sentences")  # fmt: skip
    logger.info("%s: skipped %d of %d sentences held out one by one (%d listed)", what, len(records) - len(kept),
                len(records), len(listed))  # fmt: skip
    return kept


def prepare_sentences(
    records: datasets.Dataset,
    tokenizer: PreTrainedTokenizerBase,
    tagger: SpanTagger | None,
    max_query_length: int,
    *,
    batch_size: int = 256,
    num_proc: int | None = None,
    fingerprint: str | None = None,
    exclude: Collection[str] = (),
) -> datasets.Dataset:
    """Tokenizes pre-training sentences and maps their salient spans and gold answers to wordpiece ranges.

    Args:
        records: Rows with ``text`` and optionally ``source_uid`` (uid of the block the sentence came from, "" if
            none; the retriever drops that block as a trivial candidate) and gold ``answer_start``/``answer_end``
            character offsets (None or -1 when absent). Other columns are dropped.
        tokenizer: A fast tokenizer (its offset mapping aligns characters and wordpieces).
        tagger: Salient-span tagger (named entities and dates); None leaves every ``salient_spans`` empty.
        max_query_length: Query length with [CLS]/[SEP]; sentences are truncated to ``max_query_length - 2``.
        batch_size: Sentences per ``map`` batch, which is also the tagger's batch.
        num_proc: Worker processes for ``map``.
        fingerprint: Cache key of the result; by default ``datasets`` hashes the inputs, tokenizer and tagger
            (pass one when the tagger cannot be hashed cheaply).
        exclude: Sentence texts never to prepare (``without_sentences``: held-out sentences, skipped and counted).

    Returns:
        A dataset with the columns of ``SENTENCE_FEATURES``: ``input_ids`` (int32 wordpieces without specials,
        at most ``max_query_length - 2``), ``salient_spans`` (``[start, end)`` ranges, one per tagged span lying
        wholly inside the truncated sentence; a wordpiece belongs to a span if it overlaps it), ``source_uid``,
        ``gold_span`` (``[start, end)`` or ``[-1, -1]``) and ``text``. Sentences without a salient span are kept
        (the collator rejects them) and counted in the log.
    """
    if max_query_length < 3:
        raise ValueError(f"max_query_length must leave room for [CLS], [SEP] and a wordpiece, got {max_query_length}")
    if "text" not in records.column_names:
        raise ValueError(f"sentence records need a 'text' column, got {records.column_names}")
    if ("answer_start" in records.column_names) != ("answer_end" in records.column_names):
        raise ValueError("gold answers need both 'answer_start' and 'answer_end' columns")
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("prepare_sentences needs a fast tokenizer (offset mappings)")
    check_reads_text(tokenizer, records.select(range(min(batch_size, len(records))))["text"], "the sentences")
    records = without_sentences(records, exclude, "prepare_sentences")
    if fingerprint and exclude:  # note: the caller's key names the input, not what was skipped from it
        digest = hashlib.sha1("\n".join(sorted(exclude)).encode("utf-8")).hexdigest()[:16]
        fingerprint = f"{fingerprint}-{digest}"
    prepared = records.map(
        _prepare_batch,
        batched=True,
        batch_size=batch_size,
        num_proc=num_proc,
        remove_columns=records.column_names,
        features=SENTENCE_FEATURES,
        fn_kwargs={"tokenizer": tokenizer, "tagger": tagger, "max_tokens": max_query_length - 2},
        new_fingerprint=fingerprint,
        desc="Preparing sentences",
    )
    if tagger is None:
        # note: without a tagger every row lacks salient spans by design (gold-span files: held-out sets, QA), so
        # this is no warning
        logger.info("prepared %d sentences without a tagger (salient spans left empty; gold spans kept)", len(prepared))
        return prepared
    num_without = num_without_salient_spans(prepared)
    log = logger.warning if num_without else logger.info
    log(
        "prepared %d sentences; %d have no salient span (kept: salient-span masking refuses them, random-token "
        "masking reads them)", len(prepared), num_without,
    )  # fmt: skip
    return prepared


def num_without_salient_spans(sentences: datasets.Dataset) -> int:
    """Rows of a prepared sentence dataset whose ``salient_spans`` is empty (computed in Arrow, no row loop)."""
    lengths = pc.list_value_length(sentences.data.column("salient_spans"))
    return int(pc.sum(pc.equal(lengths, 0)).as_py() or 0)


def _answer_span_problem(record: dict[str, Any]) -> str | None:
    """What is wrong with a record's gold answer span ``[answer_start, answer_end)``, or None when it lies inside its
    ``text`` or is absent (both fields missing, null or -1).

    ``prepare_sentences`` maps only a span inside the sentence to wordpieces; any other span would silently leave the
    sentence without a gold answer, and evaluation would drop it.
    """
    start, end = record.get("answer_start"), record.get("answer_end")
    if start in (None, -1) and end in (None, -1):
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)):
        return f"answer_start and answer_end must both be integers (or both null or -1), got {start!r} and {end!r}"
    if not 0 <= start < end <= len(record["text"]):
        return f"answer span [{start}, {end}) is not inside its sentence of {len(record['text'])} characters"
    return None


def load_jsonl_dataset(path: str | Path, *, cache_dir: str | Path | None = None) -> datasets.Dataset:
    """Loads a jsonl file (one JSON object per line) as an Arrow-backed dataset.

    Every line is parsed first so that a malformed one is reported as ``file:line`` rather than as an Arrow
    error from inside the json builder.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        DataFileError: A line is not UTF-8 or not a JSON object, lacks a string ``text``, has a gold answer span
            outside its text, or the file cannot be turned into a table.
    """
    path = Path(path)
    num_records = 0
    for where, record in iter_jsonl(path):
        # note: checked here, with the line, rather than met as a TypeError deep in the preparation map
        if not isinstance(record.get("text"), str):
            found = "missing" if "text" not in record else f"{type(record['text']).__name__}, not a string"
            raise DataFileError(f"{where}: field 'text' is {found}")
        problem = _answer_span_problem(record)
        if problem:
            raise DataFileError(f"{where}: {problem}")
        num_records += 1
    if num_records == 0:
        raise DataFileError(f"{path}: no records")
    try:
        return datasets.load_dataset(
            "json", data_files=str(path), split="train", cache_dir=None if cache_dir is None else str(cache_dir)
        )
    except Exception as err:  # noqa: BLE001 - Arrow raises many types; the file name is what the user needs.
        raise DataFileError(f"{path}: could not be read as a table (inconsistent field types?): {err}") from err
