"""Reader warm-up: block sentences masked and read against their own block, and the published encoder."""

from __future__ import annotations

import pytest
import torch
from transformers import BertForMaskedLM

from realm.core.config import load_config
from realm.core.logging import read_metrics
from realm.data.block_store import BlockStore
from realm.data.blocks import load_blocks
from realm.data.masking import MaskingError
from realm.data.packing import SpecialIds
from realm.data.tagging import TaggingConfig, build_tagger
from realm.data.vocab import load_tokenizer
from realm.models.encoder import KnowledgeAugmentedEncoder
from realm.pretrain.loss import marginal_mlm_loss
from realm.pretrain.reader_warmup import TrivialRetrievalCollator, prepare_block_sentences, reader_step
from realm.warmstart.warmup import WarmupConfig, train_warmup


@pytest.fixture(scope="module")
def block_sentences(tiny_world):
    """(special ids, blocks, prepared block sentences) of the tiny world, prepared once for this module."""
    tokenizer = load_tokenizer(str(tiny_world["tokenizer"]))
    blocks = load_blocks(tiny_world["blocks"])
    rows = prepare_block_sentences(blocks, tokenizer, build_tagger(TaggingConfig()), 32)
    return SpecialIds.of(tokenizer), blocks, rows


def _contains(haystack: list[int], needle: list[int]) -> bool:
    return any(haystack[i : i + len(needle)] == needle for i in range(len(haystack) - len(needle) + 1))


def test_each_masked_span_is_read_against_the_block_that_holds_it(block_sentences):
    special, blocks, rows = block_sentences
    assert len(rows) > len(blocks)  # several sentences a block
    collator = TrivialRetrievalCollator(special, BlockStore(blocks), 32, 48, "salient", seed=0)
    examples = [{**rows[i], "idx": i, "epoch": 0} for i in range(40)]
    try:
        batch = collator(examples)
    except MaskingError:  # pragma: no cover - the world tags a span in most sentences
        raise AssertionError("no block sentence could be masked")
    assert batch.size + collator.num_rejected == 40 and batch.size > 20
    for b in range(batch.size):
        ids = batch.input_ids[b][batch.attention_mask[b].bool()].tolist()
        first_sep = ids.index(special.sep)
        query, body = ids[1:first_sep], ids[first_sep + 1 : -1]
        positions = batch.mask_positions[b][batch.target_mask[b].bool()].tolist()
        targets = batch.target_ids[b][batch.target_mask[b].bool()].tolist()
        assert all(ids[p] == special.mask for p in positions), "targets must sit on [MASK]s of the query segment"
        assert all(p < first_sep for p in positions)
        assert _contains(body, targets), "the masked span must be in the body it is read against"
        assert special.mask not in body and len(query) > len(targets)
        types = batch.token_type_ids[b][: len(ids)].tolist()
        assert types == [0] * (first_sep + 1) + [1] * (len(ids) - first_sep - 1)


def test_reader_step_is_realms_loss_on_a_single_slot(block_sentences, tiny_world):
    special, blocks, rows = block_sentences
    batch = TrivialRetrievalCollator(special, BlockStore(blocks), 32, 48, "salient", seed=0)(
        [{**rows[i], "idx": i, "epoch": 0} for i in range(8)]
    )
    cfg = load_config(WarmupConfig, "configs/warmup/demo.yaml", {})
    torch.manual_seed(0)
    vocab_size = len(load_tokenizer(str(tiny_world["tokenizer"])))
    encoder = KnowledgeAugmentedEncoder.from_config(cfg.model.bert_config(vocab_size))
    loss, metrics = reader_step(encoder, batch)
    log_probs = encoder(batch.input_ids, batch.attention_mask, batch.token_type_ids, batch.mask_positions)
    nll = -log_probs.gather(-1, batch.target_ids.unsqueeze(-1)).squeeze(-1)
    mask = batch.target_mask.float()
    assert torch.allclose(loss, (nll * mask).sum() / mask.sum(), atol=1e-5)
    assert torch.allclose(loss, marginal_mlm_loss(torch.zeros(batch.size, 1), -nll.unsqueeze(1), mask), atol=1e-5)
    assert set(metrics) == {"mlm_accuracy", "span_accuracy"}


def test_warmup_publishes_an_encoder_that_pretraining_can_load(tiny_world, tmp_path):
    cfg = load_config(
        WarmupConfig,
        "configs/warmup/demo.yaml",
        {
            "train": {"run_dir": str(tmp_path / "warmup"), "max_steps": 4, "batch_size": 8, "log_interval": 2},
            "data": {"tokenizer": str(tiny_world["tokenizer"]), "blocks": str(tiny_world["blocks"])},
        },
    )
    encoder_dir = train_warmup(cfg)
    assert (encoder_dir / "manifest.json").is_file()
    mlm = BertForMaskedLM.from_pretrained(encoder_dir)
    assert mlm.config.num_hidden_layers == cfg.model.num_layers
    lines = (tmp_path / "warmup" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2  # steps 2 and 4


def test_closed_book_reads_the_null_document(block_sentences):
    """task.closed_book: the query alone, ``[CLS] masked sentence [SEP] [SEP]``, as REALM's null slot reads it."""
    special, _, rows = block_sentences
    batch = TrivialRetrievalCollator(special, None, 32, 48, "salient", seed=0)(
        [{**rows[i], "idx": i, "epoch": 0} for i in range(16)]
    )
    for b in range(batch.size):
        ids = batch.input_ids[b][batch.attention_mask[b].bool()].tolist()
        assert ids[0] == special.cls and ids[-2:] == [special.sep, special.sep] and ids.count(special.sep) == 2
        assert special.mask in ids


def test_a_closed_book_encoder_memorises_the_facts_it_reads(tiny_world, tmp_path):
    """The memoriser of experiments/demo/memorisation.py learns: closed book on Z's fact sentences, it comes to
    reproduce them (a held-back set would need retrieval; these it has read)."""
    cfg = load_config(
        WarmupConfig,
        "configs/warmup/demo.yaml",
        {
            "train": {"run_dir": str(tmp_path / "memoriser"), "max_steps": 300, "log_interval": 100},
            "data": {"tokenizer": str(tiny_world["tokenizer"]), "blocks": str(tiny_world["blocks"])},
            "task": {"closed_book": True, "sentences": str(tiny_world["z_facts"])},
            "optim": {"decay_steps": 100},
        },
    )
    train_warmup(cfg)
    accuracy = [r["warmup/span_accuracy"] for r in read_metrics(tmp_path / "memoriser" / "metrics.jsonl")]
    assert accuracy[0] < 0.2 and accuracy[-1] > 0.6, accuracy


def test_a_sentences_file_needs_closed_book():
    with pytest.raises(ValueError, match="task.sentences needs task.closed_book=true"):
        load_config(WarmupConfig, "configs/warmup/demo.yaml", {"task": {"sentences": "x.jsonl"}})
