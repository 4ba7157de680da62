"""Held-out articles are never training examples of the warm start: the reader warm-up and ICT skip every sentence
of their blocks (the blocks stay in the corpus, to be retrieved), and a list that names no article of the corpus is
refused before any training."""

from __future__ import annotations

import pytest

from realm.core.config import load_config
from realm.core.errors import ConfigError
from realm.data.articles import heldout_blocks, read_article_list
from realm.data.blocks import load_blocks
from realm.data.sentences import split_sentences
from realm.data.tagging import TaggingConfig, build_tagger
from realm.data.vocab import load_tokenizer
from realm.pretrain.reader_warmup import prepare_block_sentences
from realm.warmstart.ict_train import ICTConfig, ict_examples, train_ict
from realm.warmstart.warmup import WarmupConfig, train_warmup


@pytest.fixture(scope="module")
def corpus(tiny_world):
    """(tokenizer, blocks, held-out article titles, [N] held-out block mask) of the tiny world."""
    blocks = load_blocks(tiny_world["blocks"])
    path = str(tiny_world["heldout_articles"])
    mask = heldout_blocks(blocks, path, "test")
    return load_tokenizer(str(tiny_world["tokenizer"])), blocks, read_article_list(path), mask


def test_the_world_holds_out_some_articles_and_trains_on_the_others(corpus):
    _, blocks, held, mask = corpus
    assert 0 < mask.sum() < len(blocks)
    assert {t for t, h in zip(blocks["title"], mask) if h} == held


def test_reader_warmup_examples_hold_no_sentence_of_a_held_out_article(corpus):
    tokenizer, blocks, held, mask = corpus
    rows = prepare_block_sentences(blocks, tokenizer, build_tagger(TaggingConfig()), 32, heldout=mask)
    titles = blocks["title"]
    assert held.isdisjoint(titles[i] for i in rows["block_id"])
    # every sentence of every other block is still an example, read against its block of the whole corpus
    kept = [i for i, h in enumerate(mask) if not h]
    assert len(rows) == sum(len(split_sentences(blocks[i]["text"])) for i in kept)
    assert set(rows["block_id"]) == set(kept)


def test_ict_examples_hold_no_block_of_a_held_out_article(corpus):
    tokenizer, blocks, held, mask = corpus
    rows = ict_examples(blocks, tokenizer, heldout=mask)
    held_titles = {tuple(ids) for ids, h in zip(blocks["title_ids"], mask) if h}
    assert rows and held_titles.isdisjoint(tuple(ids) for ids in rows["title_ids"])
    kept = [i for i, h in enumerate(mask) if not h and len(split_sentences(blocks[i]["text"])) >= 2]
    assert len(rows) == len(kept)


@pytest.mark.parametrize("job", ["warmup", "ict"])
def test_both_jobs_read_the_list_and_refuse_one_that_names_no_article(job, tiny_world, tmp_path):
    cls, path, train = {"warmup": (WarmupConfig, "configs/warmup/demo.yaml", train_warmup),
                        "ict": (ICTConfig, "configs/ict/demo.yaml", train_ict)}[job]  # fmt: skip
    (tmp_path / "held.txt").write_text("Atlantis\n")
    cfg = load_config(cls, path, {
        "train": {"run_dir": str(tmp_path / job), "max_steps": 2, "batch_size": 4},
        "data": {"tokenizer": str(tiny_world["tokenizer"]), "blocks": str(tiny_world["blocks"]),
                 "heldout_articles": str(tmp_path / "held.txt")},
    })  # fmt: skip
    with pytest.raises(ConfigError, match="names no article of the corpus"):
        train(cfg)
