"""FEVER SUPPORTS spans as cloze: a claim FEVER's annotators verified against Wikipedia pages the corpus holds, one of
its salient spans masked, read zero-shot by a pre-trained REALM model with retrieval and closed book
(``realm.pretrain.heldout_eval``), no verification or QA fine-tuning.

The claims are those of ``experiments.fever.claims.read_fever_claims`` labelled SUPPORTS: every evidence page is an
article of the corpus (matched by title). REFUTES claims are never items (the span they state is false, so filling it in
is not the right answer) and NOT ENOUGH INFO claims have no evidence page. A claim's salient spans are tagged and cut as
pre-training masks them (``claim_records``); a span qualifies when

- it is not an evidence page's title nor part of it (on word boundaries, "Greek" of "Greek language"), nor the title
  with a plural "s" ("Touchscreens" of "Touchscreen"): a masked page name leaves a query that names nothing to
  retrieve, and the fact asked would be which page the claim is about;
- it does not recur in the rest of the claim (the query itself would give it away, as in ``reachable_cloze``);
- an evidence page states it in one of its blocks on word boundaries (``contains_answer``'s normalisation): the Vital
  corpus holds lead sections only, and FEVER's evidence sentence may lie past the lead. The first such page (in
  evidence order) is the item's gold article (``entity``), every such page is in ``gold_titles``;
- at most ``max_span_articles`` articles state it (``CorpusText.num_articles``), as in ``reachable_cloze``: "Spain" or
  "English" is in the blocks of hundreds of Vital articles and is predicted from priors, not from the page.

A claim gives one item, one of its qualifying spans chosen by a generator seeded with ``seed`` and the claim's text
(so the set does not depend on file order), so that items are distinct claims for a per-item McNemar test. Every
qualifying span is also written, one row each, for descriptive use (rows of one claim share ``claim_id``).

Each item records ``span_articles``, how many articles state the span (so an analysis can stratify by it), and
``names_page``, whether the claim names the gold article's title (the loose rule of ``TitleLinker``): a retriever can
reach the page by its name only then. The claims are no corpus
sentences, so ``source_uid`` is "" and the evaluation retrieves from the whole corpus, evidence pages included.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from experiments.common.title_links import Article, CorpusText, TitleLinker
from experiments.fever.claims import SUPPORTS, FeverClaim, claim_records, read_fever_claims
from realm.core.atomic import write_text_atomic
from realm.data.tagging import SpanTagger
from realm.pretrain.retrieval_table import contains_answer, fold_for_matching

logger = logging.getLogger(__name__)

ITEMS_FILE, SPANS_FILE = "fever_supports.jsonl", "fever_supports_spans.jsonl"
SPAN_IN_TITLE, SPAN_REPEATED = "span_in_page_title", "span_repeated_in_claim"
SPAN_NOT_IN_EVIDENCE, SPAN_COMMON = "span_not_in_evidence", "span_in_many_articles"
SPAN_SKIPS = (SPAN_IN_TITLE, SPAN_REPEATED, SPAN_NOT_IN_EVIDENCE, SPAN_COMMON)
"""Why a salient span of a SUPPORTS claim is no item, in the order the rules are tried (a span counts once)."""


@dataclass(kw_only=True, slots=True)
class FeverClozeConfig:
    """How FEVER SUPPORTS claims become cloze items."""

    seed: int = 0
    """Chooses each claim's one item among its qualifying spans."""
    max_span_articles: int = 10
    """A span stated by more articles than this is no item (0: no limit); ``ReachableClozeConfig``'s limit and
    reason."""
    min_title_chars: int = 3
    """Titles shorter than this are never named (``TitleLinker``); only ``names_page`` depends on it."""


@dataclass(frozen=True, slots=True)
class FeverCloze:
    """What ``write_fever_cloze`` wrote and counted."""

    items: Path
    """jsonl of the items, one per claim, in the held-out cloze schema (``text`` the claim, ``source_uid`` "",
    ``answer_start``, ``answer_end``, ``title`` "", ``label`` the span's tag) plus ``entity`` (the gold evidence page,
    which the evaluation reads for gold recall), ``gold_titles``, ``claim_id`` (FEVER's id), ``span_articles`` and
    ``names_page``."""
    spans: Path
    """jsonl of every qualifying span, one row each, as ``items``."""
    counts: dict[str, int]
    """``fever_cloze_items``'s counts, with the file's: ``records``, ``not_enough_info``, ``supports``
    and ``supports_outside_corpus`` (a SUPPORTS claim with an evidence page the corpus lacks)."""


def _singular(text: str) -> str:
    """``fold_for_matching`` less a final "s": "Touchscreens" and "Touchscreen" compare equal."""
    return fold_for_matching(text).removesuffix("s")


def _span_skip(claim: FeverClaim, row: dict, pages: dict[str, Article]) -> str | list[str]:
    """Why the row's span is no item, or the evidence pages (titles, evidence order) that state it."""
    text, start, end = row["text"], row["answer_start"], row["answer_end"]
    span = text[start:end]
    if any(contains_answer(page, span) or _singular(span) == _singular(page) for page in claim.pages):
        return SPAN_IN_TITLE
    if contains_answer(f"{text[:start]} {text[end:]}", span):
        return SPAN_REPEATED
    return [page for page in claim.pages if pages[page].in_any_block(span)] or SPAN_NOT_IN_EVIDENCE


def fever_cloze_items(
    claims: Sequence[FeverClaim], articles: dict[str, Article], tagger: SpanTagger, cfg: FeverClozeConfig
) -> tuple[list[dict], list[dict], dict[str, int]]:
    """(items, every qualifying span, counts) of the SUPPORTS claims among ``claims`` (whose evidence pages must be
    titles of ``articles``, as ``read_fever_claims`` keeps them). Counts: ``claims`` (SUPPORTS claims asked),
    ``no_salient_span``, ``no_qualifying_span``, ``items``, ``spans`` (salient spans tagged), ``qualifying_spans``
    and each of ``SPAN_SKIPS``."""
    supports = [claim for claim in claims if claim.label == SUPPORTS]
    pages = {article.title: article for article in articles.values() if article.title}
    linker = TitleLinker(articles, loose=True, min_title_chars=cfg.min_title_chars)
    corpus, stated = CorpusText(articles), {}
    rows_of: dict[int, list[dict]] = {}
    for row in claim_records(supports, tagger):
        rows_of.setdefault(row["claim"], []).append(row)
    counts = dict.fromkeys(("claims", "no_salient_span", "no_qualifying_span", "items", "spans", "qualifying_spans",
                            *SPAN_SKIPS), 0)  # fmt: skip
    counts["claims"] = len(supports)
    items, spans = [], []
    for position, claim in enumerate(supports):
        rows = rows_of.get(position, [])
        counts["spans"] += len(rows)
        named = {articles[key].title for _, _, key in linker.mentions(claim.claim)}
        qualifying = []
        for row in rows:
            found = _span_skip(claim, row, pages)
            if isinstance(found, str):
                counts[found] += 1
                continue
            span = row["text"][row["answer_start"] : row["answer_end"]]
            if span not in stated:
                stated[span] = corpus.num_articles(span)
            if stated[span] > (cfg.max_span_articles or len(articles)):
                counts[SPAN_COMMON] += 1
                continue
            qualifying.append({"text": claim.claim, "source_uid": "", "answer_start": row["answer_start"],
                               "answer_end": row["answer_end"], "title": "", "label": row["label"],
                               "entity": found[0], "gold_titles": found, "claim_id": claim.id,
                               "span_articles": stated[span], "names_page": found[0] in named})  # fmt: skip
        if not rows:
            counts["no_salient_span"] += 1
        elif not qualifying:
            counts["no_qualifying_span"] += 1
        else:
            items.append(random.Random(f"{cfg.seed}:{claim.claim}").choice(qualifying))
            spans.extend(qualifying)
    counts |= {"items": len(items), "qualifying_spans": len(spans)}
    return items, spans, counts


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    write_text_atomic(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))


def write_fever_cloze(
    fever: str | Path, articles: dict[str, Article], out_dir: str | Path, tagger: SpanTagger, cfg: FeverClozeConfig
) -> FeverCloze:
    """Reads the FEVER jsonl ``fever`` (claims whose evidence pages are all among ``articles``' titles), finds the
    items (``fever_cloze_items``) and writes ``fever_supports.jsonl`` and ``fever_supports_spans.jsonl`` into
    ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    claims, stats = read_fever_claims(fever, {article.title for article in articles.values() if article.title})
    items, spans, found = fever_cloze_items(claims, articles, tagger, cfg)
    outside = stats.num_supports - found["claims"]
    counts = {"records": stats.num_records, "not_enough_info": stats.num_not_enough_info,
              "supports": stats.num_supports, "supports_outside_corpus": outside, **found}  # fmt: skip
    _write_jsonl(out / ITEMS_FILE, items)
    _write_jsonl(out / SPANS_FILE, spans)
    logger.info("FEVER cloze: %d items (%d qualifying spans) from %d SUPPORTS claims whose evidence pages are in the "
                "corpus, of %d SUPPORTS claims read", counts["items"], counts["qualifying_spans"], counts["claims"],
                counts["supports"])  # fmt: skip
    return FeverCloze(items=out / ITEMS_FILE, spans=out / SPANS_FILE, counts=counts)
