"""A tiny GPT-2 trained in-process on a corpus, for the demo, the tests and the benchmark (this machine reaches no
hub). The model is transformers' ``GPT2LMHeadModel`` from a small ``GPT2Config``; the tokenizer is a WordPiece
vocabulary trained on the same texts (``realm.data.vocab``) unless one is given.

Training samples random windows of ``context_length`` tokens from the concatenated ``[BOS] document`` stream
(GPT-2's packing), with AdamW and a linear schedule (``realm.training.optim``). The result is published as a folder
(``save_pretrained`` in safetensors + tokenizer, manifest with checksums written last).
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerBase

from realm.core.checks import Problems
from realm.core.errors import ConfigError
from realm.core.logging import progress
from realm.data.vocab import load_tokenizer, train_wordpiece
from realm.knnlm.lm import tokenize_documents
from realm.run import publication
from realm.training.optim import OptimConfig, build_optimizer

logger = logging.getLogger(__name__)


def _default_optim() -> OptimConfig:
    return OptimConfig(lr=1e-3, warmup_steps=100, weight_decay=0.01)


@dataclass(kw_only=True, slots=True)
class TinyLMConfig:
    """Shape and training of the tiny GPT-2."""

    vocab_size: int = 8000
    """WordPiece vocabulary trained on the corpus (ignored when ``tokenizer`` is given)."""
    tokenizer: str = ""
    """An existing tokenizer folder; empty: train one."""
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    context_length: int = 128
    steps: int = 1000
    batch_size: int = 16
    seed: int = 0
    dropout: float = 0.1
    optim: OptimConfig = field(default_factory=_default_optim)

    def __post_init__(self) -> None:
        problems = Problems()
        if self.hidden_size % self.num_heads:
            problems.add(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        if min(self.num_layers, self.context_length - 1, self.steps, self.batch_size, self.vocab_size) <= 0:
            problems.add("num_layers, steps, batch_size, vocab_size must be positive and context_length >= 2")
        problems.raise_if_any()


def tiny_gpt2(vocab_size: int, cfg: TinyLMConfig, bos: int) -> GPT2LMHeadModel:
    config = GPT2Config(
        vocab_size=vocab_size,
        n_positions=cfg.context_length,
        n_embd=cfg.hidden_size,
        n_layer=cfg.num_layers,
        n_head=cfg.num_heads,
        resid_pdrop=cfg.dropout,
        embd_pdrop=cfg.dropout,
        attn_pdrop=cfg.dropout,
        bos_token_id=bos,
        eos_token_id=bos,
    )
    return GPT2LMHeadModel(config)


def _tokenizer(cfg: TinyLMConfig, texts: list[str], out: Path) -> PreTrainedTokenizerBase:
    if cfg.tokenizer:
        return load_tokenizer(cfg.tokenizer)
    return train_wordpiece(texts, cfg.vocab_size, out, lowercase=True)


def texts_fingerprint(texts: list[str]) -> str:
    """SHA-256 of the non-blank training texts, in order, each with its length: which corpus an LM was trained on."""
    digest = hashlib.sha256()
    for text in (t for t in texts if t.strip()):
        raw = text.encode()
        digest.update(len(raw).to_bytes(8, "little") + raw)
    return digest.hexdigest()


def train_tiny_lm(texts: list[str], cfg: TinyLMConfig, out_dir: str | Path) -> Path:
    """Trains the tiny GPT-2 on ``texts`` and publishes it (model + tokenizer) at ``out_dir``; returns it."""
    out_dir = Path(out_dir)
    texts = [t for t in texts if t.strip()]
    if not texts:
        raise ConfigError("the training corpus has no text")
    torch.manual_seed(cfg.seed)
    vocab_dir = out_dir.parent / f".{out_dir.name}-vocab"
    tokenizer = _tokenizer(cfg, texts, vocab_dir)
    docs = tokenize_documents(tokenizer, texts)
    stream = torch.from_numpy(np.concatenate(docs).astype(np.int64))
    if len(stream) <= cfg.context_length:
        raise ConfigError(f"the corpus has {len(stream)} tokens, fewer than one window of {cfg.context_length}")
    model = tiny_gpt2(len(tokenizer), cfg, int(docs[0][0]))
    optimizer, scheduler = build_optimizer(model, cfg.optim, cfg.steps)
    generator = torch.Generator().manual_seed(cfg.seed)
    model.train()
    started, losses = time.monotonic(), []
    bar = progress(cfg.steps, "training the tiny LM", unit="step")
    for step in range(cfg.steps):
        starts = torch.randint(0, len(stream) - cfg.context_length, (cfg.batch_size,), generator=generator)
        batch = torch.stack([stream[s : s + cfg.context_length] for s in starts.tolist()])
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        if cfg.optim.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        bar.update(1)
        if (step + 1) % max(cfg.steps // 10, 1) == 0:
            logger.info("tiny LM step %d/%d: loss %.3f", step + 1, cfg.steps, float(np.mean(losses[-50:])))
    bar.close()
    model.eval()

    def save(staging: Path) -> None:
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)

    manifest = {
        "kind": "tiny-gpt2",
        "train_tokens": len(stream),
        "texts_sha256": texts_fingerprint(texts),
        "steps": cfg.steps,
        "final_loss": round(float(np.mean(losses[-50:])), 4),
        "train_seconds": round(time.monotonic() - started, 1),
    }
    return publication.replace_published(out_dir, save, manifest)
