"""FEVER claims (Thorne et al. 2018) as cloze queries over a corpus that holds their evidence pages.

A FEVER record is ``{"id", "label", "claim", "evidence"}`` with ``label`` SUPPORTS, REFUTES or NOT ENOUGH INFO and
``evidence`` a list of evidence sets, each a list of ``[annotation_id, evidence_id, page, sentence_id]``; ``page``
is a Wikipedia page id of FEVER's 2017 dump (``Soul_Food_-LRB-film-RRB-``). ``read_fever_claims`` keeps the claims a
corpus can verify: labelled SUPPORTS or REFUTES, with every evidence page among the corpus's titles. ``claim_records``
turns each kept claim into held-out cloze rows, one per salient span, in the format of ``realm.data.cloze_sets``'s
held-out file, so the pre-training evaluation reads them as it reads held-out sentences.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Collection

from realm.data.jsonl import iter_jsonl
from realm.data.malformed import existing_file, reject
from realm.data.tagging import SpanTagger

logger = logging.getLogger(__name__)

SUPPORTS, REFUTES, NOT_ENOUGH_INFO = "SUPPORTS", "REFUTES", "NOT ENOUGH INFO"
LABELS = (SUPPORTS, REFUTES, NOT_ENOUGH_INFO)

# FEVER's page ids escape brackets and colons as the Penn Treebank does, and join words with underscores
_ESCAPES = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}", "-COLON-": ":"}


def page_title(page: str) -> str:
    """The Wikipedia title of a FEVER page id: ``Soul_Food_-LRB-film-RRB-`` -> ``Soul Food (film)``."""
    for escaped, char in _ESCAPES.items():
        page = page.replace(escaped, char)
    return page.replace("_", " ")


@dataclass(frozen=True, slots=True)
class FeverClaim:
    id: int
    claim: str
    label: str
    """SUPPORTS or REFUTES."""
    pages: tuple[str, ...]
    """The titles of every evidence page of every evidence set, in first-seen order."""


@dataclass
class FeverStats:
    num_records: int = 0
    num_malformed: int = 0
    num_supports: int = 0
    """Well-formed records labelled SUPPORTS, whether or not the corpus holds their evidence pages."""
    num_not_enough_info: int = 0
    """Claims labelled NOT ENOUGH INFO: they have no evidence page to verify them against."""
    num_outside_corpus: int = 0
    """Verifiable claims with an evidence page that is not among the corpus's titles."""


def _evidence_pages(evidence: object) -> tuple[str, ...] | str:
    """The titles of the evidence pages, or a reason why ``evidence`` is malformed."""
    if not isinstance(evidence, list) or not evidence:
        return "'evidence' must be a non-empty list of evidence sets"
    pages: dict[str, None] = {}
    for evidence_set in evidence:
        if not isinstance(evidence_set, list) or not evidence_set:
            return "each evidence set must be a non-empty list"
        for entry in evidence_set:
            if not isinstance(entry, list) or len(entry) != 4 or not isinstance(entry[2], str) or not entry[2]:
                return f"an evidence entry must be [annotation_id, evidence_id, page, sentence_id], got {entry!r}"
            pages[page_title(entry[2])] = None
    return tuple(pages)


def read_fever_claims(
    path: str | Path, titles: Collection[str], *, skip_malformed: bool = False
) -> tuple[list[FeverClaim], FeverStats]:
    """The SUPPORTS and REFUTES claims of a FEVER jsonl file whose every evidence page is in ``titles``.

    NOT ENOUGH INFO claims and claims with a page outside ``titles`` are counted and left out by design; a
    malformed record raises ``DataFileError`` naming ``file:line``, or with ``skip_malformed`` is counted.
    """
    path = existing_file(path, "FEVER claims")
    stats, claims = FeverStats(), []

    def bad(where: str, reason: str) -> None:
        reject(where, reason, skip_malformed, stats)

    for where, record in iter_jsonl(path, on_error=bad if skip_malformed else None):
        label, claim = record.get("label"), record.get("claim")
        if label not in LABELS:
            bad(where, f"'label' must be one of {list(LABELS)}, got {label!r}")
            continue
        if not isinstance(claim, str) or not claim.strip():
            bad(where, "'claim' must be a non-empty string")
            continue
        if not isinstance(record.get("id"), int):
            bad(where, f"'id' must be an integer, got {record.get('id')!r}")
            continue
        # note: NOT ENOUGH INFO claims carry evidence entries of nulls (the annotators found no page)
        pages = () if label == NOT_ENOUGH_INFO else _evidence_pages(record.get("evidence"))
        if isinstance(pages, str):
            bad(where, pages)
            continue
        stats.num_records += 1
        stats.num_supports += label == SUPPORTS
        if label == NOT_ENOUGH_INFO:
            stats.num_not_enough_info += 1
        elif all(page in titles for page in pages):
            claims.append(FeverClaim(record["id"], claim.strip(), label, pages))
        else:
            stats.num_outside_corpus += 1
    log = logger.warning if stats.num_malformed else logger.info
    log(
        "%s: %d claims kept of %d read (%d NOT ENOUGH INFO, %d with an evidence page outside the corpus, %d "
        "malformed skipped)", path, len(claims), stats.num_records, stats.num_not_enough_info,
        stats.num_outside_corpus, stats.num_malformed,
    )  # fmt: skip
    return claims, stats


def claim_records(claims: list[FeverClaim], tagger: SpanTagger) -> list[dict]:
    """One held-out cloze row per salient span of each claim: ``{"text", "answer_start", "answer_end", "title",
    "label", "claim"}``, ``title`` its first evidence page, ``claim`` the claim's position in ``claims``. A claim
    without a salient span gives no row."""
    rows = []
    for position, (claim, spans) in enumerate(zip(claims, tagger.tag([c.claim for c in claims]))):
        rows.extend(
            {"text": claim.claim, "answer_start": start, "answer_end": end, "title": claim.pages[0], "label": label,
             "claim": position}
            for start, end, label in spans
        )  # fmt: skip
    return rows
