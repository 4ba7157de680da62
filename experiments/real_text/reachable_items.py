"""Reachable held-out cloze: sentences whose masked fact another article states, in a block the sentence links to.

Held-out articles chosen at random (``realm.data.cloze_sets``) have their masked fact in a block the reader reads for
a few percent of sentences, so retrieval cannot show what it adds. Here a sentence s of article A is an item when it
names the title of another article B (``experiments.common.title_links``) and one of its salient spans m, neither the
title nor overlapping its mention nor recurring elsewhere in s (it would be copied from the query), occurs in B's
block text on word boundaries (``contains_answer``'s normalisation). The evaluation never retrieves A, so the fact
is reachable only through B (or the encoder's memory, which the closed-book figure measures):

- **strict**: s names B's title exactly (case-sensitive) and m occurs in B's *lead* block;
- **loose**: s names B under the loose rule (case-insensitive, a qualifier such as "(planet)" dropped) and m occurs
  in *any* block of B. Every strict item is also a loose item.

A span stated by more than ``max_span_articles`` articles (10 by default; "Europe" is in hundreds) is no item: what
is stated everywhere is predicted from priors, and retrieving B adds little. Each item records how many articles
state its span (``span_articles``), so an analysis can stratify by it.

A sentence gives at most one item: one of its strict (span, article) pairs if it has any, else one of its loose ones,
chosen with a generator seeded by ``seed`` and the sentence's text, so that the set does not depend on corpus order.
Every item's sentence is held out at sentence level: ``heldout_sentences.txt`` lists them for
``realm.pretrain.data.prepared_sentences(exclude=)``, and ``write_reachable_cloze`` can write X without them.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import datasets

from experiments.common.title_links import Article, CorpusText, TitleLinker, corpus_articles, names_title
from realm.core.atomic import write_text_atomic
from realm.data.articles import article_key, write_article_list
from realm.data.cloze_sets import MIN_WORDS
from realm.data.jsonl import iter_jsonl
from realm.data.sentences import split_sentences
from realm.data.tagging import Span, SpanTagger
from realm.pretrain.data import HELDOUT_SENTENCES_FILE
from realm.pretrain.retrieval_table import contains_answer

logger = logging.getLogger(__name__)

STRICT, LOOSE = "strict", "loose"


@dataclass(kw_only=True, slots=True)
class ReachableClozeConfig:
    """How reachable items are found."""

    min_title_chars: int = 3
    """Titles shorter than this are never links (``TitleLinker``)."""
    max_span_articles: int = 10
    """A span stated by more articles than this is no item (0: no limit). "Europe" or "Chinese" is in the blocks of
    hundreds of Vital articles (the median span of an unlimited item is in 49): predicting it takes priors, not B. A
    span in at most 10 articles is a fact few blocks could supply. Each item records its count (``span_articles``)."""
    seed: int = 0
    """Chooses each sentence's one item among its qualifying (span, article) pairs."""


@dataclass(frozen=True, slots=True)
class ReachableCloze:
    """What ``write_reachable_cloze`` wrote and counted."""

    strict: Path
    """jsonl of the strict items, the held-out cloze schema (``text``, ``source_uid``, ``answer_start``,
    ``answer_end``, ``title``, ``label``) plus ``entity`` (the gold article B, which ``evaluate_heldout`` reads for
    recall), ``gold_titles`` (every linked article that states the span), ``tier`` and ``span_articles`` (how many
    articles state the span, A and B included)."""
    loose: Path
    """jsonl of every item (strict and loose-only), as ``strict``."""
    heldout_sentences: Path
    """The items' sentences, one a line: what no training stage may read."""
    num_strict: int
    num_loose: int
    """Items in ``loose`` (strict ones included)."""
    num_sentences: int
    """Sentences of at least ``MIN_WORDS`` words that were searched."""
    num_linking: int
    """Sentences that name another article's title (loose rule)."""
    pretrain: Path | None = None
    """X without the held-out sentences, when ``write_reachable_cloze`` was given X."""
    num_pretrain_skipped: int = 0


def corpus_sentences(blocks: datasets.Dataset, batch_size: int = 4096) -> Iterator[tuple[str, str, str, str]]:
    """(article key, title, block uid, sentence) for every sentence of at least ``MIN_WORDS`` words, block by
    block."""
    columns = ["doc_id", "title", "uid", "text"]
    for batch in blocks.select_columns(columns).iter(batch_size=batch_size):
        for doc_id, title, uid, text in zip(*(batch[c] for c in columns)):
            for start, end in split_sentences(text):
                if len(text[start:end].split()) >= MIN_WORDS:
                    yield article_key(title, doc_id), title, uid, text[start:end]


def _pairs(sentence: str, own: str, spans: list[Span], mentions: list[tuple[int, int, str]],
           articles: dict[str, Article], strict: bool) -> list[tuple[Span, str]]:  # fmt: skip
    """(span, article key) pairs of ``sentence`` that qualify under the strict or the loose rule."""
    out = []
    # note: a span that recurs in the rest of the sentence ("the Faraday disk ... Michael Faraday") is copied from
    # the query itself, whatever the retriever does
    spans = [(s, e, lab) for s, e, lab in spans if not contains_answer(f"{sentence[:s]} {sentence[e:]}", sentence[s:e])]
    for key in sorted({key for _, _, key in mentions if key != own}):
        where = [(s, e) for s, e, k in mentions if k == key]
        article = articles[key]
        for span in spans:
            start, end, _ = span
            text = sentence[start:end]
            if any(start < e and s < end for s, e in where) or names_title(text, article.title):
                continue
            if article.in_lead(text) if strict else article.in_any_block(text):
                out.append((span, key))
    return out


def find_reachable_items(
    blocks: datasets.Dataset, tagger: SpanTagger, cfg: ReachableClozeConfig, batch_size: int = 2048
) -> tuple[list[dict], dict[str, int]]:
    """The reachable items of ``blocks`` (columns ``doc_id``, ``title``, ``uid``, ``text``), in corpus order, and
    counts (``sentences``, ``linking``, ``strict``, ``loose``). Only sentences that name another article are tagged."""
    articles = corpus_articles(blocks)
    exact = TitleLinker(articles, loose=False, min_title_chars=cfg.min_title_chars)
    loose = TitleLinker(articles, loose=True, min_title_chars=cfg.min_title_chars)
    linking, num_sentences = [], 0
    for own, title, uid, sentence in corpus_sentences(blocks):
        num_sentences += 1
        named = [m for m in loose.mentions(sentence) if m[2] != own]
        if named:
            linking.append((own, title, uid, sentence, named, [m for m in exact.mentions(sentence) if m[2] != own]))
    corpus, stated = CorpusText(articles), {}

    def specific(pairs: list[tuple[Span, str]], sentence: str) -> list[tuple[Span, str]]:
        """The pairs whose span at most ``max_span_articles`` articles state (counted once per span text)."""
        for (start, end, _), _ in pairs:
            if sentence[start:end] not in stated:
                stated[sentence[start:end]] = corpus.num_articles(sentence[start:end])
        limit = cfg.max_span_articles or len(articles)
        return [(span, key) for span, key in pairs if stated[sentence[span[0] : span[1]]] <= limit]

    items = []
    for at in range(0, len(linking), batch_size):
        chunk = linking[at : at + batch_size]
        for (own, title, uid, sentence, named, exact_named), spans in zip(chunk, tagger.tag([c[3] for c in chunk])):
            strict_pairs = specific(_pairs(sentence, own, spans, exact_named, articles, strict=True), sentence)
            loose_pairs = specific(_pairs(sentence, own, spans, named, articles, strict=False), sentence)
            pairs = strict_pairs or loose_pairs
            if not pairs:
                continue
            (start, end, label), key = random.Random(f"{cfg.seed}:{sentence}").choice(pairs)
            gold = sorted({articles[k].title for span, k in loose_pairs if span[:2] == (start, end)}
                          | {articles[key].title})  # fmt: skip
            items.append({"text": sentence, "source_uid": uid, "answer_start": start, "answer_end": end,
                          "title": title, "label": label, "entity": articles[key].title, "gold_titles": gold,
                          "tier": STRICT if strict_pairs else LOOSE,
                          "span_articles": stated[sentence[start:end]]})  # fmt: skip
    counts = {"sentences": num_sentences, "linking": len(linking),
              "strict": sum(item["tier"] == STRICT for item in items), "loose": len(items)}  # fmt: skip
    return items, counts


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    write_text_atomic(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))


def write_without(sentences: str | Path, out: Path, excluded: set[str]) -> int:
    """Copies the jsonl of pre-training sentences ``sentences`` to ``out`` less the rows whose ``text`` (stripped) is
    one of ``excluded``; returns how many were skipped."""
    listed = {text.strip() for text in excluded}
    kept, skipped = [], 0
    for _, record in iter_jsonl(Path(sentences)):
        if str(record.get("text", "")).strip() in listed:
            skipped += 1
        else:
            kept.append(record)
    _write_jsonl(out, kept)
    return skipped


def write_reachable_cloze(
    blocks: datasets.Dataset, out_dir: str | Path, tagger: SpanTagger, cfg: ReachableClozeConfig,
    sentences: str | Path | None = None,
) -> ReachableCloze:  # fmt: skip
    """Finds the reachable items (``find_reachable_items``) and writes into ``out_dir``: ``reachable_strict.jsonl``,
    ``reachable_loose.jsonl``, ``heldout_sentences.txt`` and, given the pre-training sentences X (``sentences``),
    ``pretrain.jsonl``: X without the held-out sentences, counted."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    items, counts = find_reachable_items(blocks, tagger, cfg)
    if not items:
        raise ValueError(f"no reachable cloze item in the {counts['sentences']} sentences of the corpus "
                         f"({counts['linking']} name another article's title)")  # fmt: skip
    _write_jsonl(out / "reachable_strict.jsonl", [item for item in items if item["tier"] == STRICT])
    _write_jsonl(out / "reachable_loose.jsonl", items)
    held = write_article_list(out / HELDOUT_SENTENCES_FILE, {item["text"] for item in items})
    pretrain, skipped = None, 0
    if sentences:
        pretrain = out / "pretrain.jsonl"
        skipped = write_without(sentences, pretrain, {item["text"] for item in items})
    result = ReachableCloze(strict=out / "reachable_strict.jsonl", loose=out / "reachable_loose.jsonl",
                            heldout_sentences=held, num_strict=counts["strict"], num_loose=counts["loose"],
                            num_sentences=counts["sentences"], num_linking=counts["linking"], pretrain=pretrain,
                            num_pretrain_skipped=skipped)  # fmt: skip
    logger.info("reachable cloze: %d strict and %d loose items (strict included) from %d sentences, %d of which name "
                "another article; %d sentences of X skipped", result.num_strict, result.num_loose,
                result.num_sentences, result.num_linking, skipped)  # fmt: skip
    return result
