"""RealmModel: the retriever's two towers and the knowledge-augmented encoder, tensors in and tensors out."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn
from transformers import BertConfig

from realm.models.encoder import KnowledgeAugmentedEncoder
from realm.models.retriever import (
    RETRIEVER_SHAPE_DEFAULTS,
    Retriever,
    RetrieverConfig,
    resolve_pooling,
    retrieval_scores,
)
from realm.pretrain.batch import RealmBatch
from realm.pretrain.config import PretrainConfig
from realm.run.publication import verify_published

logger = logging.getLogger(__name__)

# note: a finite stand-in for -inf keeps log_softmax/logsumexp gradients NaN-free for empty slots.
_EMPTY_SLOT_LOGIT = -1e4


@dataclass
class RealmOutput:
    """Shapes: B queries, K slots (0 = null document), M masked wordpieces."""

    retrieval_logits: Tensor
    """[B, K] f(x, z) from the live embedders; empty slots hold a large negative value."""
    token_log_probs: Tensor
    """[B, K, M] log p(y_j | z, x) of the target wordpieces."""
    predictions: Tensor
    """[B, M] argmax over the vocabulary of the marginal p(y_j | x) (no gradient)."""
    closed_book_predictions: Tensor
    """[B, M] argmax of p(y_j | null, x): what the encoder predicts without retrieval (no gradient)."""


class RealmModel(nn.Module):
    def __init__(self, retriever: Retriever, encoder: KnowledgeAugmentedEncoder) -> None:
        super().__init__()
        self.retriever = retriever
        self.encoder = encoder

    @classmethod
    def from_config(cls, bert_config: BertConfig, cfg: RetrieverConfig) -> "RealmModel":
        return cls(Retriever.from_config(bert_config, cfg), KnowledgeAugmentedEncoder.from_config(bert_config))

    def save_pretrained(self, path: str | Path) -> None:
        """``retriever/`` and ``encoder/``, each readable with ``from_pretrained``."""
        path = Path(path)
        self.retriever.save_pretrained(path / "retriever")
        self.encoder.save_pretrained(path / "encoder")

    @classmethod
    def from_pretrained(cls, path: str | Path) -> "RealmModel":
        path = Path(path)
        return cls(
            Retriever.from_pretrained(path / "retriever"), KnowledgeAugmentedEncoder.from_pretrained(path / "encoder")
        )

    def embed_queries(self, batch: RealmBatch) -> Tensor:
        """[B, D] embeddings of the masked queries."""
        return self.retriever.embed_queries(batch.query_input_ids, batch.query_attention_mask)

    def forward(self, batch: RealmBatch) -> RealmOutput:
        cand = batch.candidates
        if cand is None:
            raise ValueError("batch has no candidates: call realm.pretrain.candidates.retrieve first")
        bsz, num_slots, reader_len = cand.reader_input_ids.shape
        query_emb = self.embed_queries(batch)
        docs = cand.doc_input_ids.flatten(0, 1)
        doc_emb = self.retriever.embed_docs(
            docs, cand.doc_attention_mask.flatten(0, 1), cand.doc_token_type_ids.flatten(0, 1)
        ).view(bsz, num_slots - 1, -1)
        null = cand.null_input_ids
        null_emb = self.retriever.embed_docs(null, torch.ones_like(null), torch.zeros_like(null))
        doc_emb = torch.cat([null_emb.unsqueeze(0).expand(bsz, 1, -1), doc_emb], dim=1)  # [B, K, D]
        logits = retrieval_scores(query_emb.float(), doc_emb.float(), self.retriever.query_embedder.score_scale)
        logits = logits.masked_fill(~cand.slot_mask, _EMPTY_SLOT_LOGIT)

        positions = batch.mask_positions.repeat_interleave(num_slots, dim=0)  # [B*K, M]
        vocab_log_probs = self.encoder(
            cand.reader_input_ids.view(-1, reader_len),
            cand.reader_attention_mask.view(-1, reader_len),
            cand.reader_token_type_ids.view(-1, reader_len),
            positions,
        ).view(
            bsz, num_slots, positions.shape[1], -1
        )  # [B, K, M, V]
        targets = batch.target_ids.unsqueeze(1).expand(-1, num_slots, -1).unsqueeze(-1)
        token_log_probs = vocab_log_probs.gather(-1, targets).squeeze(-1)  # [B, K, M]
        with torch.no_grad():
            log_p_z = torch.log_softmax(logits.detach(), dim=-1)[:, :, None, None]
            predictions = torch.logsumexp(log_p_z + vocab_log_probs.detach(), dim=1).argmax(-1)
            closed_book = vocab_log_probs[:, 0].detach().argmax(-1)
        return RealmOutput(logits, token_log_probs, predictions, closed_book)


def build_model(cfg: PretrainConfig, vocab_size: int) -> RealmModel:
    """Fresh model from the config shape, with optional weights-only warm starts (ICT retriever, BERT encoder); with
    ``retriever.frozen`` the embedders require no gradient."""
    bert_config = cfg.model.bert_config(vocab_size)
    if cfg.model.init_from:
        retriever = Retriever.from_bert(cfg.model.init_from, cfg.retriever)
        encoder = KnowledgeAugmentedEncoder.from_pretrained(cfg.model.init_from)
    else:
        retriever = Retriever.from_config(bert_config, cfg.retriever)
        encoder = KnowledgeAugmentedEncoder.from_config(bert_config)
    if cfg.train.init_retriever:
        verify_published(cfg.train.init_retriever)  # note: realm ict's output lists its files with checksums
        retriever = Retriever.from_pretrained(cfg.train.init_retriever)
        # note: against the resolved pooling: retriever.pooling=model names what model.init_from was trained with
        resolved = resolve_pooling(cfg.retriever, cfg.model.init_from)
        check_retriever_matches(retriever, resolved, cfg.train.init_retriever)
    if cfg.train.init_encoder:
        verify_published(cfg.train.init_encoder)  # note: so does realm warmup's
        encoder = KnowledgeAugmentedEncoder.from_pretrained(cfg.train.init_encoder)
    if cfg.retriever.frozen:
        # note: before the optimizer is built, which takes only parameters that require a gradient
        retriever.requires_grad_(False)
        logger.info("retriever frozen (retriever.frozen): the embedders keep their starting weights and the index "
                    "built from them is never refreshed")  # fmt: skip
    return RealmModel(retriever, encoder)


def check_retriever_matches(retriever: Retriever, cfg: RetrieverConfig, source: str) -> None:
    """A warm-started retriever must have the shape and score of the run's ``retriever`` section: the run's config
    is what evaluation, inspection and resume rebuild the model from, and the score sets p(z|x)'s temperature."""
    config = retriever.query_embedder.config
    found = {name: getattr(config, name, default) for name, default in RETRIEVER_SHAPE_DEFAULTS.items()}
    expected = {name: getattr(cfg, name) for name in RETRIEVER_SHAPE_DEFAULTS}
    expected["share_embedders"], found["share_embedders"] = cfg.share_embedders, retriever.shared
    wrong = [f"{k}={found[k]!r} (config: {expected[k]!r})" for k in expected if found[k] != expected[k]]
    if wrong:
        raise ValueError(f"train.init_retriever={source} does not match the retriever section: {', '.join(wrong)}")
