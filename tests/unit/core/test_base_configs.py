"""The full-scale configs (configs/*/base.yaml) fit together: ICT trains the retriever shape pre-training loads,
the warm-up and fine-tuning read blocks as pre-training cuts them, every stage starts from the same BERT and none
prepares the whole corpus up front."""

from __future__ import annotations

from realm.core.config import load_config
from realm.finetune.train import FinetuneConfig
from realm.pretrain.config import PretrainConfig
from realm.warmstart.ict_train import ICTConfig
from realm.warmstart.warmup import WarmupConfig
from tests.helpers import ROOT

CONFIGS = ROOT / "configs"
SHAPE = ("embed_dim", "share_embedders", "pooling", "score", "score_scale", "max_query_length", "max_block_length")


def test_the_base_stages_share_the_retriever_shape_the_bert_and_the_block_length():
    pretrain = load_config(PretrainConfig, CONFIGS / "pretrain/base.yaml")
    ict = load_config(ICTConfig, CONFIGS / "ict/base.yaml")
    warmup = load_config(WarmupConfig, CONFIGS / "warmup/base.yaml")
    finetune = load_config(FinetuneConfig, CONFIGS / "finetune/base.yaml")
    assert {k: getattr(ict.retriever, k) for k in SHAPE} == {k: getattr(pretrain.retriever, k) for k in SHAPE}
    assert (pretrain.retriever.max_query_length, pretrain.retriever.max_block_length) == (96, 288)  # REALM
    for cfg in (ict, warmup):
        assert cfg.model.init_from == cfg.data.tokenizer == pretrain.model.init_from == "bert-base-uncased"
    assert (warmup.retriever.max_query_length, warmup.retriever.max_block_length) == (96, 288)
    assert warmup.tagging.kind == pretrain.data.tagging.kind  # the same salient spans in both stages
    assert (finetune.reader.reader_beam, finetune.reader.max_span_width, finetune.reader.span_hidden_size) == (5, 10, 256)
    assert finetune.task.name == "nq"
    # 288 wordpieces of body after a whole question fit the reader's input
    assert finetune.reader.max_sequence_length >= finetune.reader.max_question_length + 288


def test_no_base_stage_prepares_the_whole_corpus_in_one_process():
    assert load_config(ICTConfig, CONFIGS / "ict/base.yaml").ict.prepare == "lazy"
    assert 0 < load_config(WarmupConfig, CONFIGS / "warmup/base.yaml").task.max_blocks <= 100_000
