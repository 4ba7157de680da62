"""A tiny run directory for builder and publishing tests: a 40-word vocabulary, random blocks, random retrievers."""

from __future__ import annotations

from pathlib import Path

import datasets
import numpy as np
import torch
from transformers import BertConfig, BertTokenizer

from realm.data.blocks import BLOCK_FEATURES
from realm.models.retriever import Retriever, RetrieverConfig
from realm.run import layout

MAX_BLOCK_LENGTH = 24


def make_run(tmp_path: Path, num_blocks: int, max_body: int = 30) -> tuple[Path, Path, Path]:
    """(run_dir, blocks_path, tokenizer_path) with a 40-word vocab and ``num_blocks`` random blocks."""
    words = [f"w{i}" for i in range(40)]
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    tokenizer_path = tmp_path / "tokenizer"
    BertTokenizer(vocab_file=str(tmp_path / "vocab.txt")).save_pretrained(tokenizer_path)
    rng = np.random.default_rng(0)
    blocks = datasets.Dataset.from_dict(
        {
            "uid": [f"u{i}" for i in range(num_blocks)],
            "doc_id": [f"d{i // 3}" for i in range(num_blocks)],
            "title": [""] * num_blocks,
            "text": [""] * num_blocks,
            "title_ids": [rng.integers(5, 45, rng.integers(1, 4)).tolist() for _ in range(num_blocks)],
            "body_ids": [rng.integers(5, 45, rng.integers(1, max_body)).tolist() for _ in range(num_blocks)],
        },
        features=BLOCK_FEATURES,
    )
    blocks.save_to_disk(tmp_path / "blocks")
    return tmp_path / "run", tmp_path / "blocks", tokenizer_path


def export_tiny(run_dir: Path, step: int, blocks: Path, tokenizer: Path) -> Retriever:
    """Exports a random (seeded by ``step``) 2-layer hidden-32 retriever as ``retriever/step-{step}``."""
    torch.manual_seed(step)
    bert = BertConfig(
        vocab_size=45,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    retriever = Retriever.from_config(bert, RetrieverConfig(embed_dim=16, max_block_length=MAX_BLOCK_LENGTH))
    layout.export_retriever(
        run_dir,
        step,
        retriever,
        blocks_path=str(blocks),
        tokenizer_path=str(tokenizer),
        max_block_length=MAX_BLOCK_LENGTH,
    )
    return retriever
