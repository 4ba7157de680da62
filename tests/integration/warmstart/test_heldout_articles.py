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


def _job(job, tiny_world, tmp_path, key: str, listed: str):
    """(config, train function) of a 2-step warm-up or ICT on the tiny world whose ``data.KEY`` file lists
    ``listed``."""
    cls, path, train = {"warmup": (WarmupConfig, "configs/warmup/demo.yaml", train_warmup),
                        "ict": (ICTConfig, "configs/ict/demo.yaml", train_ict)}[job]  # fmt: skip
    (tmp_path / "held.txt").write_text(f"{listed}\n")
    cfg = load_config(cls, path, {
        "train": {"run_dir": str(tmp_path / job), "max_steps": 2, "batch_size": 4},
        "data": {"tokenizer": str(tiny_world["tokenizer"]), "blocks": str(tiny_world["blocks"]),
                 key: str(tmp_path / "held.txt")},
    })  # fmt: skip
    return cfg, train


@pytest.mark.parametrize("job", ["warmup", "ict"])
def test_both_jobs_read_the_list_and_refuse_one_that_names_no_article(job, tiny_world, tmp_path):
    cfg, train = _job(job, tiny_world, tmp_path, "heldout_articles", "Atlantis")
    with pytest.raises(ConfigError, match="names no article of the corpus"):
        train(cfg)


def test_lazy_ict_examples_are_the_eager_ones_made_when_read(corpus):
    """ict.prepare=lazy: a key reads the same sentences as the eager rows do, never a held-out block, and a block
    too short to pose a cloze gives the next one that can."""
    from realm.pretrain.ict import LazyICTExamples

    tokenizer, blocks, held, mask = corpus
    eager = ict_examples(blocks, tokenizer, heldout=mask)
    lazy = LazyICTExamples(blocks, tokenizer, mask)
    assert len(lazy) == int((~mask).sum())
    long_enough = [i for i in lazy.rows if len(split_sentences(blocks[int(i)]["text"])) >= 2]
    made = [lazy[(0, position)] for position in range(len(lazy))]
    by_block = {tuple(ex["title_ids"]) + tuple(t for s in ex["sentence_ids"] for t in s) for ex in made}
    want = {tuple(r["title_ids"]) + tuple(t for s in r["sentence_ids"] for t in s) for r in eager}
    assert by_block == want and len(long_enough) == len(eager)
    held_titles = {tuple(ids) for ids, h in zip(blocks["title_ids"], mask) if h}
    assert held_titles.isdisjoint(tuple(ex["title_ids"]) for ex in made)
    assert made[3]["idx"] == 3 and all(len(ex["sentence_ids"]) >= 2 for ex in made)


def test_ict_trains_with_lazy_examples_made_by_loader_workers(tiny_world, tmp_path):
    cfg = load_config(ICTConfig, "configs/ict/demo.yaml", {
        "train": {"run_dir": str(tmp_path / "ict"), "max_steps": 2, "batch_size": 4, "log_interval": 1},
        "data": {"tokenizer": str(tiny_world["tokenizer"]), "blocks": str(tiny_world["blocks"]),
                 "heldout_articles": str(tiny_world["heldout_articles"])},
        "ict": {"prepare": "lazy", "loader_workers": 2},  # as configs/ict/base.yaml
    })  # fmt: skip
    assert (train_ict(cfg) / "manifest.json").is_file()


def test_sentences_held_out_one_by_one_are_no_warmup_example_ict_query_or_pseudo_document(corpus, tmp_path):
    """``data.heldout_sentences`` (the reachable held-out cloze's list): its sentences leave the warm-up's examples and
    ICT's blocks (eager and lazy) while their blocks stay."""
    from realm.data.articles import TrainingBlocksInput
    from realm.pretrain.ict import LazyICTExamples

    tokenizer, blocks, _, _ = corpus
    texts = [blocks[i]["text"][a:b] for i in range(len(blocks)) for a, b in split_sentences(blocks[i]["text"])]
    held = set(texts[1:40:3])
    listed = tmp_path / "heldout_sentences.txt"
    listed.write_text("".join(f"{t}\n" for t in sorted(held)))
    excluded = TrainingBlocksInput(heldout_sentences=str(listed)).excluded_sentences()
    assert excluded == {t.strip() for t in held}

    rows = prepare_block_sentences(blocks, tokenizer, build_tagger(TaggingConfig()), 32, excluded=excluded)
    assert held.isdisjoint(rows["text"]) and len(rows) == len(texts) - sum(t in held for t in texts)

    def words(ids_rows) -> set[tuple[int, ...]]:
        return {tuple(s) for r in ids_rows for s in r["sentence_ids"]}

    held_ids = {tuple(ids) for ids in tokenizer(sorted(held), add_special_tokens=False)["input_ids"]}
    eager = ict_examples(blocks, tokenizer, excluded=excluded)
    lazy = LazyICTExamples(blocks, tokenizer, None, excluded)
    assert held_ids.isdisjoint(words(eager)) and held_ids.isdisjoint(words(lazy[(0, p)] for p in range(len(lazy))))
    assert held_ids & words(ict_examples(blocks, tokenizer))  # without the list they are read


class _Seen(Exception):
    pass


@pytest.mark.parametrize("job", ["warmup", "ict"])
def test_both_jobs_pass_their_configs_sentence_list_on(job, tiny_world, tmp_path, monkeypatch):
    import realm.warmstart.ict_train as ict_module
    import realm.warmstart.warmup as warmup_module

    def seen(*args):  # both jobs pass the excluded sentences last
        raise _Seen(args[-1])

    module, name = {"warmup": (warmup_module, "prepare_block_sentences"), "ict": (ict_module, "ict_examples")}[job]
    monkeypatch.setattr(module, name, seen)
    cfg, train = _job(job, tiny_world, tmp_path, "heldout_sentences", "A sentence held out.")
    with pytest.raises(_Seen) as passed:
        train(cfg)
    assert passed.value.args[0] == {"A sentence held out."}
