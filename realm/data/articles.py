"""Articles of the knowledge corpus: which blocks belong to one article, and which articles are held out.

An article is the blocks that share a title (``article_key``). A document cut into blocks gives each block its title;
a corpus whose documents are passages of articles (DPR's ``psgs_w100.tsv``, one 100-word passage a row with its own
id) gives each passage its article's title, so the passages of one Wikipedia article are one article here. A
document without a title is an article of its own, keyed by its id. Two documents with one title are one article: on
Wikipedia titles are unique, and elsewhere the cost is a few more blocks kept out of training or retrieval, never a
leak.

Two uses. A held-out evaluation's articles are listed in a file (``write_article_list``: one key a line;
``realm.data.cloze_sets`` and the demo world write one), which the jobs that train before REALM pre-training read
(``TrainingBlocksInput.heldout_articles``) to skip their blocks' sentences: the blocks stay in the corpus, where
retrieval may read them. And the trivial-retrieval filter can drop every block of a query's source article
(``BlockArticles``, used by ``realm.pretrain.candidates``).
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import datasets
import numpy as np

from realm.core.atomic import write_text_atomic
from realm.core.errors import ConfigError
from realm.data.block_store import BlockStore, uid_hash
from realm.data.blocks import BlocksInput

logger = logging.getLogger(__name__)

HELDOUT_ARTICLES_FILE = "heldout_articles.txt"
"""Where a pipeline lists its held-out articles, beside its held-out sentences."""


def article_key(title: str, doc_id: str) -> str:
    """The article a block belongs to: its title, or its document's id when it has none."""
    return title or doc_id


def article_keys(blocks: datasets.Dataset, batch_size: int = 65_536) -> Iterator[str]:
    """Each block's ``article_key``, in row order, reading the Arrow table a batch at a time."""
    for batch in blocks.select_columns(["title", "doc_id"]).iter(batch_size=batch_size):
        yield from map(article_key, batch["title"], batch["doc_id"])


def write_article_list(path: str | Path, keys: Iterable[str]) -> Path:
    """Writes ``keys`` to ``path``, sorted, one a line (atomically)."""
    path = Path(path)
    write_text_atomic(path, "".join(f"{key}\n" for key in sorted(set(keys))))
    return path


def read_article_list(path: str | Path) -> set[str]:
    """The article keys listed in ``path``, one a line (blank lines ignored)."""
    # note: split on "\n" only; str.splitlines would also cut a title at a Unicode line or paragraph separator
    return {line.rstrip("\r") for line in Path(path).read_text(encoding="utf-8").split("\n") if line.strip()}


@dataclass(kw_only=True, slots=True)
class TrainingBlocksInput(BlocksInput):
    """``BlocksInput`` of a job that trains on the corpus's own sentences before pre-training (reader warm-up, ICT)."""

    heldout_articles: str = ""
    """A file of held-out articles, one ``article_key`` (title, or the id of an untitled document) a line, whose
    blocks' sentences are never training examples, so that the held-out evaluation measures retrieval and not what
    was read here; their blocks stay in the corpus. ``realm real-text`` passes its ``cloze/heldout_articles.txt``,
    ``realm demo --clean-warm-start`` its ``world/heldout_articles.txt``. Empty: every block is trained on."""
    heldout_sentences: str = ""
    """A file of sentences held out one by one (one text a line: e.g. the real-text study's reachable held-out cloze
    writes ``heldout_sentences.txt``): never a warm-up example, an ICT query or part of an ICT pseudo-document,
    though their blocks stay in the corpus (pre-training's ``data.heldout_sentences`` is the same list for X)."""

    def excluded_sentences(self) -> frozenset[str]:
        """The stripped texts of ``heldout_sentences`` (empty without a file)."""
        if not self.heldout_sentences:
            return frozenset()
        return frozenset(text.strip() for text in read_article_list(self.heldout_sentences))


def heldout_blocks(blocks: datasets.Dataset, path: str, job: str) -> np.ndarray | None:
    """[N] bool, True for the blocks of the articles listed in ``path`` (None for no ``path``), logged for ``job``.

    A list that names no article of the corpus is refused (``ConfigError``): it was written for another corpus, and
    training on would train on the articles it meant to hold out. Listed articles the corpus lacks are warned of.
    """
    if not path:
        return None
    listed = read_article_list(path)
    found: set[str] = set()

    def held(key: str) -> bool:
        if key in listed:
            found.add(key)
            return True
        return False

    mask = np.fromiter((held(key) for key in article_keys(blocks)), dtype=bool, count=len(blocks))
    if not found:
        raise ConfigError(f"{path} names no article of the corpus ({len(listed)} listed; an article is a block title, "
                          "or the document id of an untitled block): held-out articles of another corpus?")  # fmt: skip
    if len(found) < len(listed):
        logger.warning("%s: %d of the %d held-out articles it lists name no block of the corpus", path,
                       len(listed) - len(found), len(listed))  # fmt: skip
    logger.info("%s: %d of %d blocks belong to %d held-out articles (%s); their sentences are not trained on", job,
                int(mask.sum()), len(blocks), len(found), path)  # fmt: skip
    return mask


class BlockArticles:
    """Each block's article as an int64 key (``uid_hash`` of its ``article_key``), and the article of the block a
    query came from, found by that block's uid hash."""

    def __init__(self, blocks: datasets.Dataset, uid_hashes: np.ndarray) -> None:
        # note: `or 1` for a block with neither title nor id (an empty key hashes to 0, which means "no source")
        keys = (uid_hash(key) or 1 for key in article_keys(blocks))
        self.hashes = np.fromiter(keys, dtype=np.int64, count=len(blocks))
        """[N] article key of each block, never 0."""
        self._by_uid = np.argsort(uid_hashes, kind="stable")
        self._sorted_uids = uid_hashes[self._by_uid]

    def of_sources(self, source_uid_hashes: np.ndarray) -> np.ndarray:
        """[B] article key of the block whose uid hash each query carries; 0 (no article) for a query without a source
        (hash 0) or whose source is no block of the corpus."""
        sources = np.asarray(source_uid_hashes, dtype=np.int64)
        if not len(self._sorted_uids):
            return np.zeros_like(sources)
        at = np.searchsorted(self._sorted_uids, sources).clip(max=len(self._sorted_uids) - 1)
        found = (self._sorted_uids[at] == sources) & (sources != 0)
        return np.where(found, self.hashes[self._by_uid[at]], 0)


_ARTICLES: weakref.WeakKeyDictionary[BlockStore, BlockArticles] = weakref.WeakKeyDictionary()


def block_articles(store: BlockStore) -> BlockArticles:
    """``store``'s ``BlockArticles``, made on first use and kept while the store lives: the filter reads them every
    batch, and a pass over the titles of a 13M-block corpus is not one to repeat."""
    articles = _ARTICLES.get(store)
    if articles is None:
        articles = _ARTICLES[store] = BlockArticles(store.blocks, store.uid_hashes)
    return articles
