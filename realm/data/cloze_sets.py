"""Pre-training and held-out cloze sentences cut from the blocks of a real corpus, with some articles held out.

On real text there are no generated facts: the pre-training sentences X are the sentences of the corpus's own blocks
(REALM pre-trains on Wikipedia and retrieves from it), each carrying its block's uid so that the trainer never
retrieves a sentence's own block (REALM's trivial-retrieval filter). The held-out set measures what retrieval adds:
the sentences of held-out articles (``realm.data.articles``: the blocks sharing a title, so DPR's passages of one
article are held out together), each with one salient span chosen as the gold answer. No training stage before the
evaluation reads their sentences: X leaves them out, and the reader warm-up and ICT skip the articles listed in
``heldout_articles.txt``. Their blocks stay in the corpus, but the evaluation never retrieves a block of the
sentence's own article, so a correct prediction needs another article that states the fact (or the encoder's memory,
which the closed-book figure measures).
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Iterable, Iterator

import datasets

from realm.data.articles import HELDOUT_ARTICLES_FILE, article_key, write_article_list
from realm.data.sentences import split_sentences
from realm.data.tagging import SpanTagger

logger = logging.getLogger(__name__)

MIN_WORDS = 4
"""Sentences shorter than this are headings or list debris ("See also."), not facts to predict."""


@dataclass(frozen=True, slots=True)
class ClozeSets:
    """The files ``write_cloze_sets`` wrote and what each holds."""

    pretrain: Path
    """jsonl ``{"text", "source_uid"}``: X, the sentences of the training articles' blocks."""
    heldout: Path
    """jsonl ``{"text", "source_uid", "answer_start", "answer_end", "title", "label"}``: sentences of the held-out
    articles, with the character range of the one salient span to predict. The article's title is not written as
    ``entity`` (which the evaluation reads as the gold article for recall): the sentence's own article is never
    retrieved."""
    num_pretrain: int
    num_heldout: int
    num_heldout_without_span: int
    """Held-out sentences left out because the tagger found no salient span in them."""
    num_short: int
    """Sentences of fewer than ``MIN_WORDS`` words, left out of both files."""
    heldout_articles: Path | None = None
    """Every held-out article's key, one a line (``realm.data.articles``): what the warm-start jobs skip."""


def choose_heldout_articles(keys: Iterable[str], count: int, seed: int) -> set[str]:
    """``count`` distinct article keys (``realm.data.articles.article_keys``) chosen by a seeded shuffle of the sorted
    keys (the same for the same corpus, whatever the order the keys come in)."""
    ids = sorted(set(keys))
    if not 0 <= count < len(ids):
        raise ValueError(f"cannot hold out {count} of {len(ids)} articles (at least one must remain for training)")
    random.Random(seed).shuffle(ids)
    return set(ids[:count])


def _sentences(blocks: datasets.Dataset, batch_size: int = 4096) -> Iterator[tuple[dict[str, str], str]]:
    """(the block's ``doc_id``, ``title``, ``uid``; one of its sentences), block by block, reading the Arrow table a
    batch at a time (a 21M-passage corpus does not fit in memory as Python strings)."""
    columns = ["doc_id", "title", "uid", "text"]
    for batch in blocks.select_columns(columns).iter(batch_size=batch_size):
        for doc_id, title, uid, text in zip(*(batch[c] for c in columns)):
            block = {"doc_id": doc_id, "title": title, "uid": uid}
            for start, end in split_sentences(text):
                yield block, text[start:end]


def write_cloze_sets(
    blocks: datasets.Dataset, out_dir: str | Path, heldout_articles: set[str], tagger: SpanTagger, seed: int,
    max_heldout: int = 0,
) -> ClozeSets:
    """Writes ``pretrain.jsonl``, ``heldout.jsonl`` and the list of ``heldout_articles`` (article keys) into
    ``out_dir`` from the saved ``blocks`` (columns ``doc_id``, ``title``, ``text``, ``uid``).

    Only the held-out sentences are tagged here (the trainer tags X itself, with its own tagger config, and caches
    the result); each keeps one of its salient spans, chosen with a generator seeded by ``seed`` and the sentence's
    position, so the set is the same for the same corpus and seed. ``max_heldout`` (0: all) keeps a seeded random
    sample of that many held-out sentences.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    short = num_pretrain = 0
    heldout_rows = []
    pretrain_path = out / "pretrain.jsonl"
    # note: X is streamed to its file (21M DPR passages give ~100M sentences); only the held-out rows are kept
    with pretrain_path.open("w", encoding="utf-8") as handle:
        for block, sentence in _sentences(blocks):
            if len(sentence.split()) < MIN_WORDS:
                short += 1
            elif article_key(block["title"], block["doc_id"]) in heldout_articles:
                heldout_rows.append((block, sentence))
            else:
                handle.write(json.dumps({"text": sentence, "source_uid": block["uid"]}, ensure_ascii=False) + "\n")
                num_pretrain += 1
    if max_heldout and len(heldout_rows) > max_heldout:
        heldout_rows = random.Random(seed).sample(heldout_rows, max_heldout)
    spans = tagger.tag([sentence for _, sentence in heldout_rows]) if heldout_rows else []
    heldout, untagged = [], 0
    for position, ((block, sentence), found) in enumerate(zip(heldout_rows, spans)):
        if not found:
            untagged += 1
            continue
        start, end, label = random.Random(f"{seed}:{position}").choice(found)
        heldout.append({"text": sentence, "source_uid": block["uid"], "answer_start": start, "answer_end": end,
                        "title": block["title"], "label": label})  # fmt: skip
    sets = ClozeSets(pretrain_path, out / "heldout.jsonl", num_pretrain, len(heldout), untagged, short,
                     write_article_list(out / HELDOUT_ARTICLES_FILE, heldout_articles))  # fmt: skip
    with sets.heldout.open("w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in heldout)
    logger.info(
        "cloze sets: %d pre-training sentences, %d held-out (%d held-out sentences without a salient span and %d "
        "sentences under %d words left out)", sets.num_pretrain, sets.num_heldout, untagged, short, MIN_WORDS,
    )  # fmt: skip
    if not heldout and heldout_articles:
        raise ValueError(f"the {len(heldout_articles)} held-out articles gave no sentence with a salient span")
    return sets


def every_span_sentences(blocks: datasets.Dataset, titles: Collection[str], tagger: SpanTagger) -> list[dict]:
    """Every salient span of every sentence of the blocks titled one of ``titles``, a held-out-format row each
    (``{"text", "source_uid", "answer_start", "answer_end", "title", "label"}``): what a model must reproduce to have
    memorised those articles (a sentence with three spans gives three rows, each masking one)."""
    chosen = [(block, s) for block, s in _sentences(blocks) if block["title"] in titles and len(s.split()) >= MIN_WORDS]
    rows = []
    for (block, sentence), spans in zip(chosen, tagger.tag([s for _, s in chosen]) if chosen else []):
        rows.extend(
            {"text": sentence, "source_uid": block["uid"], "answer_start": start, "answer_end": end,
             "title": block["title"], "label": label}
            for start, end, label in spans
        )  # fmt: skip
    return rows
