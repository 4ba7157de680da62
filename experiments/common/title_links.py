"""Which articles of the knowledge corpus a text names, and the text of each article's blocks, for endpoints whose
answer retrieval can reach: a sentence or question that names an article's title, whose answer that article states.

An article is the blocks sharing a title (``realm.data.articles.article_key``); its *lead block* is the first of them
in corpus order (for a corpus of Wikipedia lead sections cut into blocks, the opening of the lead, where an article
states its defining facts). A title is *named* by a text when it occurs there on word boundaries (no word character
on either side; a word character is Python's ``\\w``), under one of two rules:

- ``exact``: the title as written, case and all. Wikipedia titles are capitalised as the subject is in prose
  ("Albert Einstein", "20th-century classical music"), so a case-sensitive match of a proper-noun title is a mention of
  it; a common-noun title ("Water") matches only where it starts a sentence, which loses mentions but links nothing
  wrongly.
- ``loose``: case-insensitive, and a title with a parenthesised qualifier ("Mercury (planet)") is also named by its
  bare name ("Mercury"), as Wikipedia's redirects and piped links name it. Questions are lower-cased (NQ-open), so a
  title linker for questions has to be this one. It over-links common-noun titles ("what time ..." names "Time").

Titles of fewer than ``min_title_chars`` characters, or made only of stop words (``realm.data.tagging.STOPWORDS``), are
never linked: "It", "Us", "May" would link half the corpus.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

import datasets

from realm.data.articles import article_key
from realm.data.tagging import STOPWORDS
from realm.pretrain.retrieval_table import contains_normalized, fold_for_matching, normalized_for_search

_WORD = re.compile(r"\w+")
_QUALIFIER = re.compile(r"\s*\([^()]*\)\s*$")


@dataclass(kw_only=True, slots=True)
class Article:
    """One article of the corpus: its key, title and the text of its blocks, normalised once for span look-ups."""

    key: str
    title: str
    lead: str
    """``normalized_for_search`` of the lead block's text (the first block of the article in corpus order)."""
    blocks: list[str] = field(default_factory=list)
    """``normalized_for_search`` of every block's text, the lead first."""

    def in_lead(self, span: str) -> bool:
        """Whether ``span`` occurs in the lead block on word boundaries (``contains_answer``'s normalisation)."""
        return contains_normalized(self.lead, span)

    def in_any_block(self, span: str) -> bool:
        """Whether ``span`` occurs in any block of the article."""
        return any(contains_normalized(text, span) for text in self.blocks)


def corpus_articles(blocks: datasets.Dataset, batch_size: int = 4096) -> dict[str, Article]:
    """Every article of ``blocks`` (columns ``doc_id``, ``title``, ``text``) by ``article_key``, in corpus order."""
    articles: dict[str, Article] = {}
    for batch in blocks.select_columns(["doc_id", "title", "text"]).iter(batch_size=batch_size):
        for doc_id, title, text in zip(batch["doc_id"], batch["title"], batch["text"]):
            key = article_key(title, doc_id)
            searched = normalized_for_search(text)
            if key not in articles:
                articles[key] = Article(key=key, title=title, lead=searched)
            articles[key].blocks.append(searched)
    return articles


class CorpusText:
    """Every block's text normalised once (``normalized_for_search``), article after article, for answer look-ups
    over a whole corpus. An answer with a word the corpus lacks is rejected before any substring search; blocks are
    joined with two spaces, so no normalised answer (single spaces) matches across two of them."""

    def __init__(self, articles: dict[str, Article]) -> None:
        parts, self._starts, at = [], [], 0
        for article in articles.values():
            self._starts.append(at)
            parts.extend(article.blocks)
            at += sum(map(len, article.blocks))
        self._text = "".join(parts)
        self._words = set(self._text.split())

    def contains(self, answer: str) -> bool:
        """Whether ``answer`` occurs on word boundaries in some block (``contains_answer``'s normalisation)."""
        words = fold_for_matching(answer).split()
        return bool(words) and all(w in self._words for w in words) and contains_normalized(self._text, answer)

    def num_articles(self, span: str) -> int:
        """How many articles state ``span`` in some block: 1 for a fact one article states, hundreds for "Europe"."""
        words = fold_for_matching(span).split()
        if not words or not all(w in self._words for w in words):
            return 0
        needle = f" {' '.join(words)} "
        found, at = set(), self._text.find(needle)
        while at >= 0:
            found.add(bisect.bisect_right(self._starts, at) - 1)
            at = self._text.find(needle, at + 1)
        return len(found)


def _linkable(title: str, min_chars: int) -> bool:
    words = [w.lower() for w in _WORD.findall(title)]
    return len(title) >= min_chars and bool(words) and not all(w in STOPWORDS for w in words)


class TitleLinker:
    """Finds the article titles a text names (see the module docstring for the ``exact`` and ``loose`` rules).

    Args:
        articles: Article keys and titles (``corpus_articles``); an untitled article (keyed by its id) is never named.
        loose: The loose rule (case-insensitive, qualifier dropped) instead of the exact one.
        min_title_chars: Shorter titles are never linked.
    """

    def __init__(self, articles: dict[str, Article], *, loose: bool, min_title_chars: int = 3) -> None:
        self.loose = loose
        self._keys: dict[str, set[str]] = {}
        longest = 1
        for key, article in articles.items():
            names = {article.title}
            if loose and _QUALIFIER.search(article.title):
                names.add(_QUALIFIER.sub("", article.title))
            for name in names:
                if article.title and _linkable(name, min_title_chars):
                    self._keys.setdefault(self._form(name), set()).add(key)
                    longest = max(longest, len(_WORD.findall(name)))
        self._max_words = longest

    def _form(self, text: str) -> str:
        return " ".join(text.split()).lower() if self.loose else text

    def mentions(self, text: str) -> list[tuple[int, int, str]]:
        """``(start, end, article key)`` of every title ``text`` names: each substring that starts where a word starts
        and ends where a word ends (so on word boundaries) and is a title under the linker's rule."""
        words = [(m.start(), m.end()) for m in _WORD.finditer(text)]
        found = []
        for i, (start, _) in enumerate(words):
            for _, end in words[i : i + self._max_words]:
                for key in sorted(self._keys.get(self._form(text[start:end]), ())):
                    found.append((start, end, key))
        return found


def names_title(span: str, title: str) -> bool:
    """Whether ``span`` is the title itself (or its bare name without a qualifier), after answer normalisation: a
    span that only repeats the link is no fact to predict."""
    normal = fold_for_matching(span)
    return normal in {fold_for_matching(title), fold_for_matching(_QUALIFIER.sub("", title))}
