"""The reader warm-up from a sentence-embedding BERT (no MLM head): it trains the head the encoder starts without,
and it refuses a vocabulary that is not the model's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM, BertModel

from realm.core.config import load_config
from realm.core.errors import ConfigError
from realm.data.vocab import load_tokenizer
from realm.warmstart.warmup import WarmupConfig, train_warmup


def _sentence_transformers_folder(folder: Path, tokenizer_dir: Path, vocab_size: int) -> Path:
    """BertModel weights (hidden 32, 2 layers) with mean pooling and the world's tokenizer, as all-MiniLM-L6-v2."""
    torch.manual_seed(0)
    config = BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=256)  # fmt: skip
    BertModel(config, add_pooling_layer=False).save_pretrained(folder)
    load_tokenizer(tokenizer_dir).save_pretrained(folder)
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    return folder


def _config(run_dir: Path, tokenizer: Path, blocks: Path, init_from: Path) -> WarmupConfig:
    return load_config(
        WarmupConfig,
        "configs/warmup/demo.yaml",
        {
            "train": {"run_dir": str(run_dir), "max_steps": 3, "batch_size": 8, "log_interval": 3},
            "data": {"tokenizer": str(tokenizer), "blocks": str(blocks)},
            "model": {"init_from": str(init_from)},
        },
    )


def test_warmup_from_a_bert_without_head_trains_the_tied_head(tiny_world, tmp_path):
    vocab_size = len(load_tokenizer(tiny_world["tokenizer"]))
    start = _sentence_transformers_folder(tmp_path / "start", tiny_world["tokenizer"], vocab_size)
    encoder_dir = train_warmup(_config(tmp_path / "warmup", start, tiny_world["blocks"], start))
    mlm = BertForMaskedLM.from_pretrained(encoder_dir)
    head = mlm.cls.predictions
    assert head.decoder.weight.data_ptr() == mlm.bert.embeddings.word_embeddings.weight.data_ptr()
    # the head started fresh (LayerNorm 1, biases 0): a few steps move every part of it
    assert not torch.all(head.transform.LayerNorm.weight == 1)
    assert head.transform.dense.bias.abs().max() > 0 and head.bias.abs().max() > 0
    assert not torch.equal(mlm.bert.embeddings.word_embeddings.weight,
                           BertModel.from_pretrained(start).embeddings.word_embeddings.weight)  # fmt: skip


def test_warmup_refuses_a_tokenizer_that_is_not_the_models(tiny_world, tmp_path):
    vocab_size = len(load_tokenizer(tiny_world["tokenizer"]))
    start = _sentence_transformers_folder(tmp_path / "start", tiny_world["tokenizer"], vocab_size + 7)
    with pytest.raises(ConfigError, match=f"has {vocab_size} entries but model.init_from=.* has vocab_size "
                       f"{vocab_size + 7}"):  # fmt: skip
        train_warmup(_config(tmp_path / "warmup", tiny_world["tokenizer"], tiny_world["blocks"], start))
