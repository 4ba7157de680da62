"""Articles of the corpus: the blocks that share a title (one document's blocks, or DPR's passages of one article),
an untitled document its own; the held-out list the warm-start jobs read; the article of a query's source block."""

from __future__ import annotations

import logging

import datasets
import numpy as np
import pytest

from realm.core.errors import ConfigError
from realm.data.articles import article_keys, block_articles, heldout_blocks, read_article_list, write_article_list
from realm.data.block_store import BlockStore, uid_hash
from realm.data.blocks import BLOCK_FEATURES

BLOCKS = datasets.Dataset.from_dict(
    {"uid": ["u0", "u1", "u2", "u3", "u4", "u5"], "doc_id": ["101", "102", "103", "ada", "ada", "x9"],
     "title": ["Paris", "Paris", "Rome", "Ada Lovelace", "Ada Lovelace", ""], "text": [""] * 6,
     "title_ids": [[1]] * 6, "body_ids": [[2]] * 6},
    features=BLOCK_FEATURES,
)  # fmt: skip
"""Two DPR-style passages of Paris (their own ids, one title), Rome, a document cut into two blocks, an untitled one."""


def test_passages_sharing_a_title_are_one_article_and_an_untitled_document_is_its_own():
    assert list(article_keys(BLOCKS)) == ["Paris", "Paris", "Rome", "Ada Lovelace", "Ada Lovelace", "x9"]
    articles = block_articles(BlockStore(BLOCKS))
    keys = articles.hashes.tolist()
    assert keys[0] == keys[1] and keys[3] == keys[4] and len(set(keys)) == 4 and 0 not in keys
    sources = np.array([uid_hash("u1"), uid_hash("u3"), uid_hash("u5"), 0, uid_hash("not a block")])
    # a query without a source, or whose source is no block of the corpus, has no article (0)
    assert articles.of_sources(sources).tolist() == [keys[0], keys[3], keys[5], 0, 0]


def test_the_held_out_blocks_are_every_block_of_each_listed_article(tmp_path, caplog):
    path = write_article_list(tmp_path / "heldout_articles.txt", ["Paris", "x9", "Atlantis"])
    assert read_article_list(path) == {"Paris", "x9", "Atlantis"}
    with caplog.at_level(logging.INFO):
        mask = heldout_blocks(BLOCKS, str(path), "ICT")
    assert mask.tolist() == [True, True, False, False, False, True]
    assert "ICT: 3 of 6 blocks" in caplog.text and "1 of the 3 held-out articles" in caplog.text
    assert heldout_blocks(BLOCKS, "", "ICT") is None  # no list: every block is trained on


def test_a_held_out_list_that_names_no_article_of_the_corpus_is_refused(tmp_path):
    path = write_article_list(tmp_path / "heldout_articles.txt", ["Atlantis", "Lemuria"])
    with pytest.raises(ConfigError, match="names no article of the corpus"):
        heldout_blocks(BLOCKS, str(path), "the reader warm-up")
