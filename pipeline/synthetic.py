"""The demo's data: the synthetic world embedded in the code, its WordPiece vocabulary and its blocks."""

from __future__ import annotations

from pathlib import Path

from realm.data.blocks import build_blocks_from_config
from realm.data.corpus import CorpusConfig
from realm.data.jsonl import iter_field
from realm.data.vocab import train_wordpiece
from realm.data.world import WorldConfig, generate_world, write_world
from realm.pipeline import layout


def make_world_data(run: Path, seed: int, num_entities: int, vocab_size: int, max_block_length: int) -> dict[str, Path]:
    """The generated world under ``run/world``, its WordPiece vocabulary (``run/tokenizer``) and its corpus cut into
    blocks (``run/blocks``): ``realm.pipeline.layout``; returns the world's file paths plus ``tokenizer`` and
    ``blocks``."""
    paths = write_world(generate_world(WorldConfig(seed=seed, num_entities=num_entities)), layout.world_dir(run))
    tokenizer_dir, blocks_dir = layout.tokenizer_dir(run), layout.blocks_dir(run)
    tokenizer = train_wordpiece(iter_field([paths["corpus"], paths["pretrain"]], "text"), vocab_size, tokenizer_dir)
    corpus = CorpusConfig(path=str(paths["corpus"]), max_block_length=max_block_length)
    build_blocks_from_config(corpus, tokenizer, blocks_dir)
    return {**paths, "tokenizer": tokenizer_dir, "blocks": blocks_dir}
