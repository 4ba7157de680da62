"""A pre-training run read back from its directory: resolved config, tokenizer, blocks and the model of a checkpoint.

Checkpoints are ``accelerator.save_state`` folders, whose ``model.safetensors`` holds the ``RealmModel`` state dict
without the MLM decoder weights tied to the word embeddings (safetensors cannot store aliases); anything else missing
or unexpected is an error. Used by ``realm inspect`` / ``realm evaluate-mlm`` and by QA fine-tuning's ``init.run``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from transformers import PreTrainedTokenizerBase

from realm.core.errors import RunError
from realm.data.block_store import BlockStore
from realm.data.blocks import check_blocks_tokenizer, load_blocks
from realm.data.packing import SpecialIds
from realm.data.vocab import load_tokenizer
from realm.models.retriever import resolve_pooling
from realm.pretrain.config import PretrainConfig
from realm.pretrain.model import RealmModel
from realm.run.layout import CONFIG_FILE, checkpoints_dir, latest_retriever_export
from realm.run.paths import load_run_config
from realm.run.publication import read_manifest
from realm.training.checkpoint import TRAINER_STATE, load_weights, resolve_resume

MODEL_FILE = "model.safetensors"
"""What ``accelerator.save_state`` names the weights of the first (here: only) prepared model."""


@dataclass
class LoadedRun:
    """Everything the inspection commands need from a run, loaded once."""

    run_dir: Path
    cfg: PretrainConfig
    tokenizer: PreTrainedTokenizerBase
    special: SpecialIds
    store: BlockStore
    model: RealmModel
    checkpoint: Path
    step: int
    """Optimizer step of the checkpoint."""
    tokenizer_path: str
    blocks_path: str


def _local_path(path: str, fallback: str | None) -> str:
    """``path`` from the run's config, or ``fallback`` (the absolute path the retriever export recorded) when
    ``path`` is relative to another working directory; ``path`` itself when neither exists."""
    if path and Path(path).exists():
        return path
    return fallback if fallback and Path(fallback).exists() else path


def load_model(cfg: PretrainConfig, vocab_size: int, weights: Path) -> RealmModel:
    """A ``RealmModel`` of the run's shape with the weights of ``weights`` (a ``model.safetensors``).

    The model is built from the config alone (``RealmModel.from_config``): warm starts and ``model.init_from`` would
    only load weights the checkpoint overwrites.
    """
    try:
        bert_config = cfg.model.bert_config(vocab_size)
        # note: retriever.pooling=model is the pooling of model.init_from, as the run's embedders were built with
        retriever_cfg = resolve_pooling(cfg.retriever, cfg.model.init_from)
    except OSError as err:  # model.init_from names a hub model and the hub is out of reach
        raise RunError(f"cannot read the BertConfig of model.init_from={cfg.model.init_from!r}: {err}") from None
    return load_weights(RealmModel.from_config(bert_config, retriever_cfg), weights).eval()


def load_run(run_dir: str | Path, checkpoint: str | None = None, overrides: list[str] | None = None) -> LoadedRun:
    """Config, tokenizer, blocks and model (newest complete checkpoint, or ``checkpoint``) of a run directory, its
    paths where they are now when the run has moved (``realm.run.paths``), ``overrides`` (``--data.blocks=PATH``)
    applied to its config."""
    run = Path(run_dir)
    if not run.is_dir():
        raise RunError(f"run directory not found: {run}")
    config_file = run / CONFIG_FILE
    if not config_file.is_file():
        raise RunError(f"{run} has no config.yaml (is it a run directory written by `realm train`?)")
    cfg = load_run_config(PretrainConfig, config_file, run, overrides)

    try:
        # note: the advice is this caller's; the trainer's (--train.resume=never) is an option these commands lack
        folder = resolve_resume(run, "auto" if checkpoint is None else checkpoint, none_verified=(
            "pass --checkpoint with an intact copy of one, or train the run again (`realm train`)"))  # fmt: skip
    except FileNotFoundError as err:
        raise RunError(str(err)) from None
    if folder is None:
        raise RunError(
            f"no complete checkpoint under {checkpoints_dir(run)} (one is written every "
            f"train.save_interval={cfg.train.save_interval} steps); pass --checkpoint to choose one"
        )
    weights = folder / MODEL_FILE
    if not weights.is_file():
        raise RunError(f"{folder} has no {MODEL_FILE} (not a checkpoint written by accelerator.save_state)")
    try:
        step = int(json.loads((folder / TRAINER_STATE).read_text())["step"])
    except (OSError, ValueError, KeyError):
        step = int((read_manifest(folder) or {}).get("step", -1))

    export = latest_retriever_export(run)
    manifest = export[2] if export else {}
    where = "read where recorded, else where the run's move took it; --data.tokenizer/--data.blocks=PATH override it"
    try:
        tokenizer_path = _local_path(cfg.data.tokenizer, manifest.get("tokenizer"))
        tokenizer = load_tokenizer(tokenizer_path)
    except (OSError, ValueError) as err:
        raise RunError(f"data.tokenizer of {config_file} ({where}): {err}") from None
    blocks = _local_path(cfg.data.blocks, manifest.get("blocks"))
    if not blocks or not Path(blocks).is_dir():
        raise RunError(f"data.blocks = {cfg.data.blocks!r} of {config_file} not found ({where})")
    check_blocks_tokenizer(blocks, tokenizer)
    store = BlockStore(load_blocks(blocks))
    model = load_model(cfg, len(tokenizer), weights)
    return LoadedRun(run, cfg, tokenizer, SpecialIds.of(tokenizer), store, model, folder, step, tokenizer_path, blocks)
