"""Candidates (null slot, source filter) and the model's forward: gradients reach both towers and the encoder."""

import datasets
import numpy as np
import pytest
import torch
from transformers import BertConfig

from realm.data.block_store import BlockStore, uid_hash
from realm.data.blocks import BLOCK_FEATURES
from realm.data.packing import SpecialIds, pack_pair
from realm.index.mips import BruteForceIndex
from realm.models.retriever import RetrieverConfig
from realm.pretrain.batch import PretrainCollator
from realm.pretrain.candidates import build_candidates, retrieve, select_candidates
from realm.pretrain.loss import marginal_mlm_loss
from realm.pretrain.model import RealmModel

SPECIAL = SpecialIds(cls=2, sep=3, pad=0, mask=4)
VOCAB = 40


def _store(n=12, seed=0, bodies=None):
    """A real BlockStore over ``n`` random blocks (or over ``bodies``, wordpiece lists)."""
    rng = np.random.default_rng(seed)
    n = len(bodies) if bodies is not None else n
    uids = [f"{i:040x}" for i in range(1, n + 1)]
    blocks = datasets.Dataset.from_dict(
        {
            "uid": uids,
            "doc_id": [f"d{i}" for i in range(n)],
            "title": [""] * n,
            "text": [""] * n,
            "title_ids": [rng.integers(5, VOCAB, 2).tolist() for _ in range(n)],
            "body_ids": bodies or [rng.integers(5, VOCAB, int(rng.integers(3, 9))).tolist() for _ in range(n)],
        },
        features=BLOCK_FEATURES,
    )
    return BlockStore(blocks), uids


def _batch(source_uids, seed=0):
    rng = np.random.default_rng(seed)
    examples = [
        {
            "input_ids": rng.integers(5, VOCAB, 8).tolist(),
            "salient_spans": [[2, 4]],
            "idx": i,
            "source_uid_hash": uid_hash(u),
        }
        for i, u in enumerate(source_uids)
    ]
    return PretrainCollator(SPECIAL, 16, "salient", seed=0)(examples)


def test_source_document_is_never_a_candidate_and_slots_stay_full():
    store, uids = _store()
    retrieved = torch.tensor([[5, 1, 2, 3, 4], [1, 2, 3, 4, 6]])
    sources = torch.tensor([uid_hash(uids[5]), uid_hash(uids[3])])
    chosen = select_candidates(retrieved, sources, store.uid_hashes, num_retrieved=3)
    assert chosen.tolist() == [[1, 2, 3], [1, 2, 4]]


class FixedIndex:
    """Returns the same ranking, ``ids`` ([B, n]), for every search."""

    def __init__(self, ids: list[list[int]]) -> None:
        self.ids = torch.tensor(ids)

    def search(self, queries, k):
        return torch.zeros(self.ids[:, :k].shape), self.ids[:, :k]


def _articles_store(doc_ids):
    """Blocks 0 and 1 are article A (one document cut in two, or two DPR passages sharing the title), 2 is B, 3 C."""
    titles = ["A", "A", "B", "C"]
    blocks = datasets.Dataset.from_dict(
        {"uid": [f"u{i}" for i in range(4)], "doc_id": doc_ids, "title": titles, "text": [""] * 4,
         "title_ids": [[5 + i] for i in range(4)], "body_ids": [[20 + i, 21 + i] for i in range(4)]},
        features=BLOCK_FEATURES,
    )  # fmt: skip
    return BlockStore(blocks)


@pytest.mark.parametrize("doc_ids", [["a", "a", "b", "c"], ["1", "2", "3", "4"]], ids=["document", "dpr_passages"])
@pytest.mark.parametrize("exclude, expected", [("block", [1, 2]), ("article", [2, 3])])
def test_pretraining_drops_the_source_block_or_with_article_every_block_of_its_article(doc_ids, exclude, expected):
    """REALM drops the sentence's own block (``block``, the default); ``article`` also drops its article's others."""
    cfg = RetrieverConfig(num_candidates=3, num_extra_retrieved=2, exclude_source=exclude)
    batch = retrieve(torch.zeros(2, 1), _batch(["u0", ""]), FixedIndex([[0, 1, 2, 3]] * 2), _articles_store(doc_ids),
                     SPECIAL, cfg)  # fmt: skip
    assert batch.candidates.block_ids[:, 1:].tolist() == [expected, [0, 1]]  # a query without a source drops nothing


def test_the_source_filter_defaults_to_realms_own_block_and_refuses_other_values():
    assert RetrieverConfig().exclude_source == "block"
    with pytest.raises(ValueError, match="exclude_source must be"):
        RetrieverConfig(exclude_source="title")


def test_rows_that_run_out_of_candidates_are_padded_and_masked():
    store, uids = _store(n=3)
    chosen = select_candidates(torch.tensor([[0, 1, -1]]), torch.tensor([uid_hash(uids[0])]), store.uid_hashes, 3)
    assert chosen.tolist() == [[1, -1, -1]]
    batch = _batch([uids[0]])
    cand = build_candidates(batch, chosen, store, SPECIAL, max_block_length=16)
    assert cand.slot_mask.tolist() == [[True, True, False, False]]


def test_null_document_is_in_slot_zero_with_an_empty_body():
    store, uids = _store()
    batch = _batch(["", ""])
    cand = build_candidates(batch, torch.tensor([[0, 1], [2, 3]]), store, SPECIAL, max_block_length=16)
    assert cand.block_ids[:, 0].tolist() == [-1, -1]
    query = batch.query_input_ids[0][batch.query_attention_mask[0].bool()].tolist()
    null_reader = cand.reader_input_ids[0, 0][cand.reader_attention_mask[0, 0].bool()].tolist()
    assert null_reader == query + [SPECIAL.sep]  # [CLS] q [SEP] [SEP]: empty body
    full = cand.reader_input_ids[0, 1][cand.reader_attention_mask[0, 1].bool()].tolist()
    assert full == query + store.tokens([0])[1][0] + [SPECIAL.sep]  # body only, no title (as the original)
    assert cand.null_input_ids.tolist() == [[SPECIAL.cls, SPECIAL.sep, SPECIAL.sep]]


def test_answer_slots_mark_the_blocks_whose_body_holds_the_masked_span_in_order():
    batch = _batch(["", ""])
    (a, b), (c, d) = [row[m.bool()].tolist() for row, m in zip(batch.target_ids, batch.target_mask)]
    assert len({a, b, c, d}) == 4  # note: the bodies below are only told apart if the answers share no wordpiece
    bodies = [[9, a, b, 9], [b, a], [c, 9, d], [9, 9, c, d], [a, b]]
    store, _ = _store(bodies=bodies)
    cand = build_candidates(batch, torch.tensor([[1, 0, 4], [2, 3, -1]]), store, SPECIAL, max_block_length=16)
    assert cand.answer_slots.tolist() == [[False, False, True, True], [False, False, True, False]]


def test_candidates_packed_from_flat_wordpieces_equal_the_list_layout_slot_by_slot():
    """``build_candidates`` packs by array operations; each slot must still be ``pack_pair``'s layout of its own
    block (document tower: title and body; reader: query and body; missing blocks and slot 0 empty)."""
    rng = np.random.default_rng(7)
    store, _ = _store(n=30, seed=7)
    batch = _batch([""] * 6, seed=7)
    retrieved = torch.as_tensor(rng.integers(0, 30, (6, 4)))
    retrieved[1, 2:] = -1  # note: a row that ran out of candidates
    retrieved[4, 3] = -1
    cand = build_candidates(batch, retrieved, store, SPECIAL, max_block_length=16)
    queries = [row[m.bool()].tolist()[1:-1] for row, m in zip(batch.query_input_ids, batch.query_attention_mask)]
    assert batch.query_tokens() == queries
    widths = []
    for b in range(6):
        for r in range(4):
            block = int(retrieved[b, r])
            title, body = store.tokens([block]) if block >= 0 else ([[]], [[]])
            doc, doc_types = pack_pair(title[0][:8], body[0], SPECIAL, 16)
            got = cand.doc_input_ids[b, r][cand.doc_attention_mask[b, r].bool()].tolist()
            assert got == doc and cand.doc_token_type_ids[b, r][: len(doc)].tolist() == doc_types
            read, read_types = pack_pair(queries[b], body[0], SPECIAL, 64)
            got = cand.reader_input_ids[b, r + 1][cand.reader_attention_mask[b, r + 1].bool()].tolist()
            assert got == read and cand.reader_token_type_ids[b, r + 1][: len(read)].tolist() == read_types
            widths.append(len(read))
        null, _ = pack_pair(queries[b], [], SPECIAL, 64)
        assert cand.reader_input_ids[b, 0][cand.reader_attention_mask[b, 0].bool()].tolist() == null
    assert cand.reader_input_ids.shape[-1] == max(widths)  # padded to the longest pair, nothing cut


@pytest.mark.parametrize("shared", [True, False])
def test_gradients_reach_both_embedders_and_the_encoder(shared):
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    cfg = RetrieverConfig(
        embed_dim=16,
        share_embedders=shared,
        max_query_length=16,
        max_block_length=16,
        num_candidates=4,
        num_extra_retrieved=1,
    )
    model = RealmModel.from_config(config, cfg)
    store, uids = _store()
    batch = _batch([uids[0], uids[1], ""])
    from realm.pretrain.heldout_eval import embed_corpus

    index = BruteForceIndex(embed_corpus(model.retriever.doc_embedder, store.blocks, SPECIAL, 16))
    batch = retrieve(model.embed_queries(batch), batch, index, store, SPECIAL, cfg)
    assert not (batch.candidates.block_ids[:2, 1:] == torch.tensor([[0], [1]])).any()  # own source filtered
    out = model(batch)
    assert out.retrieval_logits.shape == (3, 4)
    assert out.token_log_probs.shape == (3, 4, 2)
    loss = marginal_mlm_loss(out.retrieval_logits, out.token_log_probs, batch.target_mask)
    loss.backward()
    towers = {"query": model.retriever.query_embedder, "doc": model.retriever.doc_embedder, "encoder": model.encoder}
    for name, module in towers.items():
        grads = [p.grad for p in module.parameters() if p.grad is not None]
        assert grads and sum(g.abs().sum().item() for g in grads) > 0, f"no gradient reached the {name}"
    if not shared:
        # separate towers: the document tower's gradient comes only from re-embedding the candidates
        assert model.retriever.doc_embedder.projection.weight.grad.abs().sum() > 0
        assert model.retriever.query_embedder is not model.retriever.doc_embedder


@pytest.mark.parametrize("shared", [True, False])
def test_model_round_trips_through_from_pretrained(tmp_path, shared):
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
    )
    cfg = RetrieverConfig(embed_dim=16, share_embedders=shared, pooling="mean")
    model = RealmModel.from_config(config, cfg).eval()
    model.save_pretrained(tmp_path / "m")
    assert (tmp_path / "m" / "encoder" / "model.safetensors").is_file()
    loaded = RealmModel.from_pretrained(tmp_path / "m").eval()
    assert loaded.retriever.shared == shared
    ids = torch.randint(5, VOCAB, (3, 7))
    mask = torch.ones_like(ids)
    assert torch.allclose(model.retriever.embed_docs(ids, mask), loaded.retriever.embed_docs(ids, mask))
    assert torch.allclose(model.retriever.embed_queries(ids, mask), loaded.retriever.embed_queries(ids, mask))
    positions = torch.tensor([[1, 2]] * 3)
    assert torch.allclose(
        model.encoder(ids, mask, torch.zeros_like(ids), positions),
        loaded.encoder(ids, mask, torch.zeros_like(ids), positions),
    )


def test_cosine_score_normalises_embeddings_and_scales_the_slot_logits(tmp_path):
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
    )
    cfg = RetrieverConfig(embed_dim=16, num_candidates=3, num_extra_retrieved=0, score="cosine", score_scale=7.0)
    model = RealmModel.from_config(config, cfg).eval()
    ids = torch.randint(5, VOCAB, (4, 6))
    emb = model.retriever.embed_docs(ids, torch.ones_like(ids))
    assert torch.allclose(emb.norm(dim=-1), torch.ones(4), atol=1e-5)
    store, uids = _store()
    batch = _batch(uids[:2])
    batch.candidates = build_candidates(batch, torch.tensor([[0, 1], [2, 3]]), store, SPECIAL, 16)
    out = model(batch)
    # slot logits are scale x cosine: bounded by the scale, and equal to it only for identical directions
    cand = batch.candidates
    docs = model.retriever.embed_docs(
        cand.doc_input_ids.flatten(0, 1), cand.doc_attention_mask.flatten(0, 1), cand.doc_token_type_ids.flatten(0, 1)
    )
    query = model.embed_queries(batch)
    expected = 7.0 * torch.nn.functional.cosine_similarity(query[:, None], docs.view(2, 2, -1), dim=-1)
    assert torch.allclose(out.retrieval_logits[:, 1:], expected, atol=1e-5)
    assert out.retrieval_logits.abs().max() <= 7.0 + 1e-5
    # the score travels with the weights, so the builder, fine-tuning and inspection read scores the same way
    model.save_pretrained(tmp_path / "m")
    loaded = RealmModel.from_pretrained(tmp_path / "m")
    assert loaded.retriever.query_embedder.score_scale == 7.0
    assert torch.allclose(loaded.retriever.embed_docs(ids, torch.ones_like(ids)), emb, atol=1e-6)


def test_retriever_config_rejects_unknown_scores():
    with pytest.raises(ValueError, match="score must be one of"):
        RetrieverConfig(score="l2")
    with pytest.raises(ValueError, match="score_scale must be positive"):
        RetrieverConfig(score_scale=0.0)


def test_init_from_a_bert_without_mlm_head_ties_the_decoder_to_its_word_embeddings(tmp_path):
    """REALM starts all three networks from BERT; a sentence-embedding BERT (e.g. all-MiniLM-L6-v2) ships a
    ``BertModel`` only, so the MLM decoder must be the checkpoint's own word embeddings, not a random matrix."""
    from transformers import BertModel

    from realm.models.encoder import KnowledgeAugmentedEncoder
    from realm.models.retriever import Retriever

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
    )
    BertModel(config, add_pooling_layer=False).save_pretrained(tmp_path / "bert")
    saved = BertModel.from_pretrained(tmp_path / "bert")
    encoder = KnowledgeAugmentedEncoder.from_pretrained(tmp_path / "bert")
    words = saved.embeddings.word_embeddings.weight
    assert torch.equal(encoder.mlm.bert.embeddings.word_embeddings.weight, words)
    decoder = encoder.mlm.cls.predictions.decoder.weight
    assert decoder.data_ptr() == encoder.mlm.bert.embeddings.word_embeddings.weight.data_ptr()
    retriever = Retriever.from_bert(str(tmp_path / "bert"), RetrieverConfig(embed_dim=16, score="cosine"))
    assert torch.equal(retriever.query_embedder.bert.embeddings.word_embeddings.weight, words)
    assert retriever.query_embedder.config.score == "cosine"


def test_a_warm_started_retriever_must_match_the_runs_retriever_section(tmp_path):
    """Evaluation and inspection rebuild the model from the run's config, so a retriever whose score (and hence
    p(z|x)'s temperature) differs from the config would be read back wrongly: the trainer refuses it."""
    from realm.core.config import load_config
    from realm.models.retriever import Retriever
    from realm.pretrain.config import PretrainConfig
    from realm.pretrain.model import build_model

    shape = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64}
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64)  # fmt: skip
    Retriever.from_config(config, RetrieverConfig(embed_dim=16, score="cosine", score_scale=10.0)).save_pretrained(
        tmp_path / "ict"
    )
    section = {"embed_dim": 16, "score": "cosine", "score_scale": 10.0}
    init = {"init_retriever": str(tmp_path / "ict")}
    model = build_model(load_config(PretrainConfig, None, {"train": init, "model": shape, "retriever": section}), VOCAB)
    assert model.retriever.query_embedder.score_scale == 10.0
    for wrong in ({"score": "inner_product"}, {"score_scale": 1.0}, {"embed_dim": 8}):
        cfg = load_config(PretrainConfig, None, {"train": init, "model": shape, "retriever": {**section, **wrong}})
        with pytest.raises(ValueError, match=f"does not match the retriever section: {next(iter(wrong))}="):
            build_model(cfg, VOCAB)


@pytest.mark.parametrize("shared", [True, False])
def test_a_frozen_retriever_is_out_of_the_optimizer_and_keeps_its_weights(shared):
    """``retriever.frozen``: REALM's marginal loss still trains the encoder through p(z|x), but no optimizer step
    (weight decay included) moves either tower."""
    from realm.core.config import load_config
    from realm.pretrain.config import PretrainConfig
    from realm.pretrain.model import build_model
    from realm.training.optim import OptimConfig, build_optimizer, retriever_lr

    torch.manual_seed(0)
    shape = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64, "dropout": 0.0}
    section = {"embed_dim": 16, "share_embedders": shared, "max_query_length": 16, "max_block_length": 16,
               "num_candidates": 4, "num_extra_retrieved": 1, "frozen": True}  # fmt: skip
    cfg = load_config(PretrainConfig, None, {"model": shape, "retriever": section})
    model = build_model(cfg, VOCAB)
    optimizer, _ = build_optimizer(model, OptimConfig(lr=1e-2, weight_decay=0.5, warmup_steps=0), 10)
    in_optimizer = {id(p) for group in optimizer.param_groups for p in group["params"]}
    towers = [model.retriever.query_embedder, model.retriever.doc_embedder]
    assert not in_optimizer & {id(p) for tower in towers for p in tower.parameters()}
    assert in_optimizer == {id(p) for p in model.encoder.parameters()} and retriever_lr(optimizer) is None
    start = {name: p.detach().clone() for name, p in model.retriever.named_parameters()}
    encoder_start = [p.detach().clone() for p in model.encoder.parameters()]

    store, uids = _store()
    batch = _batch([uids[0], uids[1], ""])
    from realm.pretrain.heldout_eval import embed_corpus

    index = BruteForceIndex(embed_corpus(model.retriever.doc_embedder, store.blocks, SPECIAL, 16))
    batch = retrieve(model.embed_queries(batch), batch, index, store, SPECIAL, cfg.retriever)
    out = model(batch)
    assert torch.isfinite(out.retrieval_logits).all() and out.retrieval_logits[:, 1:].std() > 0  # slots weighted
    loss = marginal_mlm_loss(out.retrieval_logits, out.token_log_probs, batch.target_mask)
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss) and not out.retrieval_logits.requires_grad
    assert all(p.grad is None for p in model.retriever.parameters())
    assert all(torch.equal(p, start[name]) for name, p in model.retriever.named_parameters())
    assert any(not torch.equal(p, p0) for p, p0 in zip(model.encoder.parameters(), encoder_start))
