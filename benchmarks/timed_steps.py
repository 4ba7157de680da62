"""The steps ``benchmarks/step.py`` times, on random data of its shape flags (the demo shape by default): the REALM step
as ``trainer/pretrain_loop.py`` runs it, with and without ``train.prefetch_candidates``, a plain ``BertForMaskedLM``
step over the same padded tensors, and the QA fine-tuning step as ``finetune/train.py`` runs it.
``benchmarks/hf_realm_peer.py`` times the same REALM step against the Hugging Face classes."""

from __future__ import annotations

import argparse
from contextlib import AbstractContextManager

import datasets
import numpy as np
import torch
from benchmarks.flops import bert_flops, device_time, mlm_head_flops  # benchmarks/flops.py, beside this file
from torch import Tensor, nn
from transformers import BertConfig, BertForMaskedLM

from realm.data.block_store import BlockStore
from realm.data.packing import SpecialIds
from realm.index.mips import BruteForceIndex
from realm.models.reader import SpanReader, reader_config
from realm.models.retriever import Embedder, RetrieverConfig
from realm.pretrain.batch import PretrainCollator, RealmBatch
from realm.pretrain.candidates import retrieve, start_search
from realm.pretrain.loss import get_loss
from realm.pretrain.model import RealmModel
from realm.pretrain.step import train_step
from realm.qa.batch import QABatch, RetrievedBlocks
from realm.qa.model import OpenQAModel
from realm.trainer.candidate_prefetch import CandidatePipeline
from realm.training.optim import OptimConfig, build_optimizer

SPECIAL = SpecialIds(cls=2, sep=3, pad=0, mask=4)
Seqs = tuple[Tensor, Tensor, Tensor]  # input_ids, attention_mask, token_type_ids, each [N, L]


BERT_SHAPE_FLAGS = (("hidden", 128), ("layers", 2), ("heads", 4), ("intermediate", 512), ("vocab", 6000))
"""The BERT's shape flags and their defaults (the demo shape), read by ``bert_config``; ``benchmarks/builder.py`` takes
them too."""


def shape_parser(description: str) -> argparse.ArgumentParser:
    """The model and step shape flags (the demo shape by default), shared with ``benchmarks/hf_realm_peer.py``."""
    p = argparse.ArgumentParser(description=description)
    for name, default in [
        *BERT_SHAPE_FLAGS,
        ("batch", 16),
        ("query-len", 14),
        ("span", 3),
        ("candidates", 5),
        ("extra", 2),
        ("body-len", 64),
        ("block-len", 96),
        ("corpus", 2000),
        ("embed-dim", 128),
        ("steps", 8),
        ("warmup", 2),
        ("threads", 0),
        ("peak-size", 2048),
        ("qa-beam", 20),
        ("qa-span-width", 10),
        ("qa-span-hidden", 256),
    ]:
        p.add_argument(f"--{name}", type=int, default=default)
    p.add_argument("--bf16", action="store_true", help="torch.autocast bf16 (cuda when present, else cpu)")
    p.add_argument("--precisions", default="fp32,bf16",
                   help="benchmarks/step.py: the precisions timed side by side in one run (--bf16: bf16 alone)")
    p.add_argument(
        "--prefetch", action="store_true",
        help="also time the step with train.prefetch_candidates (the next batch searched while this one trains)",
    )  # fmt: skip
    p.add_argument(
        "--compile", action="store_true",
        help="benchmarks/step.py: every BERT inside each step through torch.compile (inductor; dynamic shapes, since "
             "padded lengths change from batch to batch); compilation happens in the --warmup steps",
    )  # fmt: skip
    p.add_argument("--json", default=None, help="also write the figures to this path")
    return p


def bert_config(args: argparse.Namespace, max_length: int) -> BertConfig:
    """The BERT of the shape flags for sequences up to ``max_length``, dropout off (timings, not training); shared
    with ``benchmarks/builder.py`` and ``benchmarks/hf_realm_peer.py``."""
    return BertConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        intermediate_size=args.intermediate,
        max_position_embeddings=max(512, max_length),
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )


def reader_length(args: argparse.Namespace) -> int:
    """The longest reader sequence of the shape flags: ``[CLS] query [SEP] block [SEP]``."""
    return args.query_len + args.block_len + 3


def random_store(num_blocks: int, body_len: int, vocab: int, rng: np.random.Generator) -> BlockStore:
    """The library's own ``BlockStore`` over random titles and bodies (so the step reads blocks as the trainer does)."""
    titles = [rng.integers(5, vocab, 3).tolist() for _ in range(num_blocks)]
    # note: bodies of body_len-8..body_len keep the padded shape (what the FLOPs count) close to the real one
    bodies = [rng.integers(5, vocab, int(rng.integers(max(1, body_len - 8), body_len + 1))).tolist()
              for _ in range(num_blocks)]  # fmt: skip
    empty = [""] * num_blocks
    blocks = datasets.Dataset.from_dict({"uid": [f"block-{i}" for i in range(num_blocks)], "title": empty,
                                         "text": empty, "title_ids": titles, "body_ids": bodies})  # fmt: skip
    return BlockStore(blocks)


def step_seqs(batch: RealmBatch) -> dict[str, Seqs]:
    """The padded sequences the step encodes, by tower: reader [B*K, Lr], doc [B*(K-1), Ld], query [B, Lq]."""
    cand = batch.candidates.to("cpu")
    fields = ("input_ids", "attention_mask", "token_type_ids")
    seqs = {name: tuple(getattr(cand, f"{name}_{f}").flatten(0, 1) for f in fields) for name in ("reader", "doc")}
    query = batch.query_input_ids.cpu()
    return {**seqs, "query": (query, batch.query_attention_mask.cpu(), torch.zeros_like(query))}


class RealmStep:
    """The trainer's step (as ``trainer/pretrain_loop.py`` runs it) on fresh random queries, timed part by part."""

    def __init__(self, args: argparse.Namespace, c: BertConfig, device: torch.device, autocast: AbstractContextManager):
        self.args, self.device, self.autocast = args, device, autocast
        self.rng = np.random.default_rng(0)
        self.cfg = RetrieverConfig(
            embed_dim=args.embed_dim,
            max_query_length=args.query_len + 2,
            max_block_length=args.block_len,
            num_candidates=args.candidates,
            num_extra_retrieved=args.extra,
        )
        self.model = RealmModel.from_config(c, self.cfg).to(device)
        self.optimizer, self.scheduler = build_optimizer(
            self.model, OptimConfig(lr=1e-4, warmup_steps=0), args.warmup + args.steps
        )
        self.loss_fn = get_loss("per_token")
        self.store = random_store(args.corpus, args.body_len, args.vocab, self.rng)
        # note: a fixed random index is enough: between refreshes the trainer only reads it, and timings do not
        # depend on which blocks come back
        self.index = BruteForceIndex(torch.randn(args.corpus, args.embed_dim))
        self.collator = PretrainCollator(SPECIAL, self.cfg.max_query_length, "salient", seed=0)
        self.num_steps = 0

    def _batch(self) -> RealmBatch:
        """What the data loader hands the loop (built outside the timed region, as the loader does), on the host."""
        a, examples = self.args, []
        for i in range(a.batch):
            start = int(self.rng.integers(0, a.query_len - a.span + 1))
            examples.append(
                {
                    "input_ids": self.rng.integers(5, a.vocab, a.query_len).tolist(),
                    "salient_spans": [[start, start + a.span]],
                    "idx": self.num_steps * a.batch + i,
                    "source_uid_hash": int(self.store.uid_hashes[self.rng.integers(a.corpus)]),
                }
            )
        self.num_steps += 1
        return self.collator(examples)

    def __call__(self) -> tuple[dict[str, float], RealmBatch]:
        """One step: ({part: seconds}, the batch with its candidates)."""
        batch, device, model = self._batch().to(self.device), self.device, self.model
        t0 = device_time(device)
        model.eval()  # as the loop: deterministic query embeddings for the search
        with torch.no_grad(), self.autocast:
            query_emb = model.embed_queries(batch)
        model.train()
        t1 = device_time(device)
        batch = retrieve(
            query_emb,
            batch,
            self.index,
            self.store,
            SPECIAL,
            self.cfg,
        )
        batch = batch.to(device)
        t2 = device_time(device)
        t3, t4 = self._train(batch)
        parts = {"search_embed": t1 - t0, "retrieve": t2 - t1, "fwd_bwd": t3 - t2, "optimizer": t4 - t3}
        return {"step": t4 - t0, **parts}, batch

    def _train(self, batch: RealmBatch) -> tuple[float, float]:
        """Forward, backward, clip and AdamW; returns the clock after the backward and after the optimizer."""
        with self.autocast:
            out = train_step(self.model, batch, self.loss_fn)
        out.loss.backward()
        t3 = device_time(self.device)
        nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return t3, device_time(self.device)


class PrefetchedRealmStep(RealmStep):
    """The step with ``train.prefetch_candidates``, through the trainer's ``CandidatePipeline``: the next batch's
    queries are embedded first, then its search and packing run in a worker thread during this batch's forward and
    backward. Same shapes, data and initialisation as ``RealmStep``."""

    def __init__(self, args: argparse.Namespace, c: BertConfig, device: torch.device, autocast: AbstractContextManager):
        super().__init__(args, c, device, autocast)
        self.pipeline = CandidatePipeline(self._start_retrieval, device, prefetch=True)
        self.upcoming: RealmBatch | None = None

    def _start_retrieval(self, batch: RealmBatch, chosen: Tensor | None):
        return start_search(self.model, batch, self.index, self.store, SPECIAL, self.cfg, self.autocast)

    def __call__(self) -> tuple[dict[str, float], RealmBatch]:
        current = self.upcoming or self._batch()
        self.upcoming = self._batch()
        t0 = device_time(self.device)
        batch = next(iter(self.pipeline.batches([current], following=self.upcoming)))
        t2 = device_time(self.device)
        t3, t4 = self._train(batch)
        parts = {"candidates": t2 - t0, "fwd_bwd": t3 - t2, "optimizer": t4 - t3}
        return {"step": t4 - t0, **parts}, batch


class MlmStep:
    """A plain MLM step: ``BertForMaskedLM`` (labels at 15% of positions, logits at all) + backward + clip + AdamW."""

    def __init__(self, c: BertConfig, device: torch.device, autocast: AbstractContextManager, towers: tuple[str, ...]):
        self.c, self.device, self.autocast, self.towers = c, device, autocast, towers
        torch.manual_seed(0)
        self.mlm = BertForMaskedLM(c).to(device)
        self.optimizer, _ = build_optimizer(self.mlm, OptimConfig(lr=1e-4, warmup_steps=0), 1)

    def __call__(self, seqs: dict[str, Seqs]) -> tuple[float, float, int]:
        """Trains on ``seqs`` of ``self.towers`` (one forward per tower); returns (seconds, FLOPs, tokens)."""
        inputs = [tuple(t.to(self.device) for t in seqs[name]) for name in self.towers]
        t0 = device_time(self.device)
        with self.autocast:
            loss = 0.0
            for ids, mask, types in inputs:
                labels = ids.masked_fill((torch.rand(ids.shape, device=self.device) > 0.15) | (mask == 0), -100)
                loss = loss + self.mlm(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels).loss
        loss.backward()
        nn.utils.clip_grad_norm_(self.mlm.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        seconds = device_time(self.device) - t0
        tokens = sum(ids.numel() for ids, _, _ in inputs)  # note: the head runs at every position, padding too
        flops = mlm_head_flops(self.c, tokens) + sum(bert_flops(self.c, *ids.shape) for ids, _, _ in inputs)
        return seconds, flops, tokens


class QaStep:
    """The QA fine-tuning step as ``finetune/train.py`` runs it: the live query tower scored against the frozen
    embeddings of the ``--qa-beam`` retrieved blocks, the span reader (spans up to ``--qa-span-width``, an MLP of
    ``--qa-span-hidden``) over the top ``--candidates`` blocks of ``reader_length`` wordpieces, the marginal retriever
    + reader loss (``realm.qa.loss``), backward, clipping and AdamW. The search and packing run on the host before
    the step in fine-tuning too (``attach_blocks``), so random tensors of their shapes stand in for them here."""

    def __init__(self, args: argparse.Namespace, c: BertConfig, device: torch.device, autocast: AbstractContextManager):
        self.args, self.device, self.autocast = args, device, autocast
        torch.manual_seed(0)
        embedder_config = BertConfig.from_dict(c.to_dict())
        embedder_config.embed_dim = args.embed_dim
        reader = SpanReader(reader_config(c, args.qa_span_hidden))
        self.model = OpenQAModel(Embedder(embedder_config), reader, args.qa_span_width).to(device)
        self.optimizer, _ = build_optimizer(self.model, OptimConfig(lr=1e-4, warmup_steps=0), 1)
        self.generator = torch.Generator().manual_seed(0)

    def _batch(self) -> QABatch:
        a, g = self.args, self.generator
        b, r, k, length, width = a.batch, a.qa_beam, a.candidates, reader_length(a), a.qa_span_width
        ids = torch.randint(5, a.vocab, (b, k, length), generator=g)
        span_valid = torch.ones(b, k, length, width, dtype=torch.bool)
        span_valid[:, :, :, 1:] &= torch.arange(length)[:, None] + torch.arange(1, width) < length  # inside the seq
        # note: about one answer span in every read block, as the demo's questions have
        span_correct = (torch.rand(b, k, length, width, generator=g) < 1 / (length * width)) & span_valid
        blocks = RetrievedBlocks(
            block_ids=torch.arange(b * r).view(b, r),
            block_valid=torch.ones(b, r, dtype=torch.bool),
            doc_embeddings=nn.functional.normalize(torch.randn(b, r, a.embed_dim, generator=g), dim=-1),
            has_answer=torch.rand(b, r, generator=g) < 0.3,
            reader_input_ids=ids,
            reader_attention_mask=torch.ones_like(ids),
            reader_token_type_ids=torch.zeros_like(ids),
            span_valid=span_valid,
            span_correct=span_correct,
        )
        query = torch.randint(5, a.vocab, (b, a.query_len + 2), generator=g)
        return QABatch(query, torch.ones_like(query), torch.arange(b), blocks).to(self.device)

    def __call__(self) -> tuple[float, float, int]:
        """One step on a fresh random batch (built before the clock starts); returns (seconds, FLOPs, tokens)."""
        batch = self._batch()
        t0 = device_time(self.device)
        with self.autocast:
            out = self.model(batch)
        out.loss(batch).loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        seconds = device_time(self.device) - t0
        reader_ids, query_ids = batch.blocks.reader_input_ids, batch.query_input_ids
        c = self.model.reader.config
        # note: the span MLP (start/end projections at every position, then W spans a position) is not counted,
        # nor the embedder's projection: MFU here is the BERT layers' share, as for the other rows
        flops = bert_flops(c, reader_ids.shape[0] * reader_ids.shape[1], reader_ids.shape[2])
        flops += bert_flops(c, *query_ids.shape)
        return seconds, flops, reader_ids.numel() + query_ids.numel()
