"""What a pretrained BERT (``model.init_from``: a local folder, or a hub name, read from the local cache or downloaded
when online) says about itself: its config, its pooling as trained, whether its weights hold an MLM head, and its
vocabulary.

REALM starts all three networks from one BERT. A sentence-embedding BERT (sentence-transformers, e.g.
all-MiniLM-L6-v2) ships a ``BertModel`` only, trained with mean pooling; a stock BERT ships the MLM head and was
trained on [CLS] (next-sentence prediction). Starting well means reading which of the two a folder is, from its
files and the names of its weights, never by loading the tensors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from transformers import BertConfig, PreTrainedTokenizerBase
from transformers.utils import cached_file

from realm.core.errors import ConfigError, InputError, MissingFileError
from realm.data.vocab import load_tokenizer, looks_local

POOLINGS = ("cls", "mean")
"""The poolings the embedders implement (``realm.models.retriever.Embedder``)."""
MLM_HEAD_PREFIX = "cls.predictions."
"""Weight names of BertForMaskedLM's (and BertForPreTraining's) MLM head: the transform, the bias, the decoder."""
WEIGHT_FILES = (
    "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json"
)  # fmt: skip
"""Where ``from_pretrained`` finds weights, in its order of preference (safetensors first)."""
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt")
"""Either one is enough for a fast BERT tokenizer (``vocab.txt`` is converted on load)."""
_ST_POOLING_MODES = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean"}
"""sentence-transformers ``Pooling`` flags -> our pooling; the other flags (max, mean_sqrt_len, ...) have no match."""

TRAINING_DTYPE = torch.float32
"""The dtype every network is loaded in. Many published checkpoints are saved in fp16 or bf16, and transformers loads a
folder in the dtype it was saved in: the optimizer would then step half-precision weights. Mixed precision (bf16
autocast) is the training loop's choice, not the checkpoint's."""


class LoadsInTrainingDtype:
    """Mixin for the project's ``PreTrainedModel`` classes: ``from_pretrained`` loads in ``TRAINING_DTYPE`` unless the
    caller names another ``dtype``."""

    @classmethod
    def from_pretrained(cls, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("dtype", TRAINING_DTYPE)
        return super().from_pretrained(*args, **kwargs)  # type: ignore[misc]


def _file(name_or_path: str | Path, filename: str) -> Path | None:
    """``filename`` of a folder, or of a hub model's cached snapshot (downloaded when online); None if absent."""
    if looks_local(name_or_path):
        path = Path(name_or_path).expanduser() / filename
        return path if path.is_file() else None
    found = cached_file(
        str(name_or_path),
        filename,
        _raise_exceptions_for_missing_entries=False,
        _raise_exceptions_for_connection_errors=False,
    )
    return Path(found) if found else None


def read_bert_config(name_or_path: str | Path) -> BertConfig:
    """The ``BertConfig`` of a pretrained BERT, with a one-line user error when there is none.

    Raises:
        MissingFileError: A local path that does not exist.
        InputError: A folder without ``config.json``, or a hub name that cannot be read (offline, or no such model).
    """
    name = str(name_or_path)
    if looks_local(name):
        folder = Path(name).expanduser()
        if not folder.is_dir():
            raise MissingFileError(f"pretrained BERT folder not found: {folder}")
        if not (folder / "config.json").is_file():
            raise InputError(f"{folder} has no config.json: not a saved BERT (save_pretrained writes one)")
    try:
        return BertConfig.from_pretrained(name)
    except (OSError, ValueError) as err:
        raise InputError(f"could not read a BERT config from {name!r} (a local folder, or a hub name when online): "
                         f"{str(err).splitlines()[0]}") from None  # fmt: skip


def model_pooling(name_or_path: str | Path) -> str:
    """The pooling the model's sentence embedding was trained with: ``cls`` or ``mean``.

    In order: the ``pooling`` a saved realm embedder records in its config.json; sentence-transformers'
    ``Pooling`` module config (``modules.json`` names its folder, usually ``1_Pooling``); else ``cls``, what a
    plain BERT's [CLS] was trained for (next-sentence prediction).

    Raises:
        InputError: The folder was trained with a pooling the embedders do not implement (max, mean_sqrt_len, ...).
    """
    config_file = _file(name_or_path, "config.json")
    config = json.loads(config_file.read_text()) if config_file is not None else {}
    if config.get("pooling") in POOLINGS:
        return config["pooling"]
    pooling_config = _file(name_or_path, f"{_pooling_folder(name_or_path)}/config.json")
    if pooling_config is None:
        return "cls"
    flags = json.loads(pooling_config.read_text())
    modes = [name for name, value in flags.items() if name.startswith("pooling_mode") and value is True]
    if len(modes) != 1 or modes[0] not in _ST_POOLING_MODES:
        raise InputError(f"{pooling_config} pools with {modes or 'no mode'}; the embedders implement one of "
                         f"{sorted(_ST_POOLING_MODES)} (set retriever.pooling to cls or mean explicitly)")  # fmt: skip
    return _ST_POOLING_MODES[modes[0]]


def _pooling_folder(name_or_path: str | Path) -> str:
    """The folder of the sentence-transformers ``Pooling`` module (``1_Pooling`` unless modules.json says else)."""
    modules = _file(name_or_path, "modules.json")
    if modules is not None:
        for module in json.loads(modules.read_text()):
            if str(module.get("type", "")).endswith(".Pooling") and module.get("path"):
                return str(module["path"])
    return "1_Pooling"


def weight_names(name_or_path: str | Path) -> set[str]:
    """Names of the tensors in the model's weight files (safetensors headers, shard indexes, or a ``.bin``'s
    pickle opened with ``weights_only`` and ``mmap``, so no tensor is read); empty when there are no weights."""
    for filename in WEIGHT_FILES:
        path = _file(name_or_path, filename)
        if path is None:
            continue
        if filename.endswith(".index.json"):
            return set(json.loads(path.read_text())["weight_map"])
        if filename.endswith(".safetensors"):
            with safe_open(str(path), framework="pt") as weights:
                return set(weights.keys())
        return set(torch.load(path, map_location="cpu", weights_only=True, mmap=True))
    return set()


def has_mlm_head(name_or_path: str | Path) -> bool:
    """Whether the weights hold an MLM head (``cls.predictions.*``); a sentence-embedding BERT holds none."""
    return any(name.startswith(MLM_HEAD_PREFIX) for name in weight_names(name_or_path))


def has_tokenizer(name_or_path: str | Path) -> bool:
    """Whether the model ships its own vocabulary (``tokenizer.json`` or ``vocab.txt``)."""
    return any(_file(name_or_path, filename) is not None for filename in TOKENIZER_FILES)


def model_tokenizer(name_or_path: str | Path) -> PreTrainedTokenizerBase:
    """The model's own tokenizer, with a one-line user error when it ships none."""
    if not has_tokenizer(name_or_path):
        raise InputError(f"{name_or_path} has no tokenizer ({' or '.join(TOKENIZER_FILES)}): save the tokenizer the "
                         "model was trained with there, or name it in data.tokenizer")  # fmt: skip
    return load_tokenizer(name_or_path)


def load_model_tokenizer(tokenizer_source: str | Path, init_from: str | Path | None) -> PreTrainedTokenizerBase:
    """A stage's tokenizer (``data.tokenizer``), checked against ``model.init_from``'s vocabulary when set: the one
    place the training stages (ICT, reader warm-up, pre-training) load it."""
    tokenizer = load_tokenizer(tokenizer_source)
    check_tokenizer_fits_model(tokenizer, tokenizer_source, init_from)
    return tokenizer


def check_tokenizer_fits_model(
    tokenizer: PreTrainedTokenizerBase, tokenizer_source: str | Path, init_from: str | Path | None
) -> None:
    """Refuses a tokenizer whose vocabulary is not the pretrained model's: a smaller one would run, but every id
    would read another wordpiece's embedding. A no-op without ``init_from`` (the model is built for the tokenizer).

    Raises:
        ConfigError: ``len(tokenizer)`` differs from the model's ``vocab_size``; the message names both sizes and
            both paths.
    """
    if not init_from:
        return
    vocab_size = read_bert_config(init_from).vocab_size
    if len(tokenizer) == vocab_size:
        return
    advice = (
        f"use the model's own (data.tokenizer={init_from}, and blocks built with it)"
        if has_tokenizer(init_from)
        else "use the tokenizer the model was trained with"
    )
    raise ConfigError(f"data.tokenizer={tokenizer_source} has {len(tokenizer)} entries but model.init_from={init_from} "
                      f"has vocab_size {vocab_size}: {advice}")  # fmt: skip
