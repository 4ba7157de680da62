"""Splits a kNN-LM result can be trusted on: whole articles, never shared between validation, test and datastore.

A document's *article* is its title (``CorpusConfig.title_field`` names the field, so any article id works, e.g.
``--valid.title_field=article_id``). Paragraphs of one article share names, facts and phrasing, so settings chosen
on one paragraph of an article and reported on another are chosen on the data they report; splitting by article is
what makes a validation split held out.

``assign_articles`` cuts a list of articles into named splits in a fixed pseudo-random order (sha256 of the id) by
cumulative size, so a split's share of the words holds exactly and an article's split never depends on which other
articles exist before it in a file. ``check_disjoint`` refuses splits that share an article, naming how many and one.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Collection, Iterable, Mapping, Sequence

from realm.core.errors import ConfigError, DataFileError
from realm.data.corpus import CorpusConfig, Document
from realm.knnlm.datastore_build import read_corpus


def article_ids(docs: Sequence[Document], option: str) -> list[str]:
    """Each document's article id (its title); a document without one is an error naming it and ``--option``."""
    missing = [d for d in docs if not d.title.strip()]
    if missing:
        first = missing[0]
        raise DataFileError(
            f"{first.where or first.id}: {len(missing)} of {len(docs)} documents of --{option} have no title, so "
            f"their article is unknown (the split check needs one per document; --{option}.title_field names the "
            "field that holds it)"
        )
    return [d.title.strip() for d in docs]


def read_articles(corpus: CorpusConfig, option: str) -> tuple[list[str], list[str]]:
    """(texts, article ids) of a corpus, one per document, in order."""
    docs = read_corpus(corpus)
    return [d.text for d in docs], article_ids(docs, option)


def assign_articles(sizes: Iterable[tuple[str, int]], shares: Mapping[str, float], rest: str) -> dict[str, str]:
    """{article id: split}: articles in sha256 order of their id, each put in the first split of ``shares`` (in
    order) whose cumulative share of the total size exceeds the size of the articles before it; the others in
    ``rest``. Sizes are any additive measure (words, tokens)."""
    articles = sorted(dict(sizes).items(), key=lambda item: hashlib.sha256(item[0].encode()).hexdigest())
    if any(share < 0 for share in shares.values()) or sum(shares.values()) > 1.0 + 1e-9:
        raise ConfigError(f"split shares must be >= 0 and sum to at most 1, got {dict(shares)}")
    if rest in shares:
        raise ConfigError(f"the rest split {rest!r} must not also have a share")
    bounds = list(zip(shares, itertools.accumulate(shares.values())))
    total = sum(size for _, size in articles) or 1
    out, seen = {}, 0
    for article, size in articles:
        fraction = seen / total
        out[article] = next((name for name, bound in bounds if fraction < bound), rest)
        seen += size
    return out


def shared_articles(a: Collection[str], b: Collection[str]) -> list[str]:
    """Article ids in both ``a`` and ``b``, sorted."""
    return sorted(set(a) & set(b))


def check_disjoint(splits: Mapping[str, Collection[str]], what: str = "article") -> None:
    """Raises ``ConfigError`` when two of the named splits share an ``what``, naming the pair, the count and one.

    Args:
        splits: {split name: its article ids (repeats allowed: one per document)}.
    """
    for (name_a, a), (name_b, b) in itertools.combinations(splits.items(), 2):
        both = shared_articles(a, b)
        if both:
            raise ConfigError(
                f"{name_a} and {name_b} share {len(both)} {what}(s) (e.g. {both[0]!r}); split by {what} so that no "
                f"{what} is in both"
            )
