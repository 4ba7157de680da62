"""``realm export``: a pre-training run's models and index in the formats researchers load them with.

- ``hf``: the knowledge-augmented encoder (``BertForMaskedLM``) via ``save_pretrained``, with its tokenizer:
  ``AutoModelForMaskedLM.from_pretrained(OUT)``, ``AutoTokenizer.from_pretrained(OUT)``.
- ``sentence-transformers``: the retriever's towers (``realm.run.export_st``): ``SentenceTransformer(OUT)``,
  ``encode_query`` / ``encode_document``.
- ``pyserini``: the index (FAISS + docid file) and the blocks as parquet (``realm.run.export_index``).

The model comes from the run's newest complete checkpoint (or ``step``/``checkpoint``), loaded as ``realm inspect``
loads it (``realm.pretrain.saved_run.load_run``). A bare retriever folder (``RUN/ict/retriever``, a trainer's
``RUN/retriever/step-N``: ``realm.pretrain.saved_retriever``) exports as ``sentence-transformers``, or as
``pyserini`` with an exact index of its document tower over its run's blocks; it has no MLM encoder for ``hf``.

Every export is written into a staging folder beside OUT and renamed to OUT with a ``manifest.json`` (what was
exported from which run and step, the files and their checksums) written last, so OUT is either complete or absent.
The same writers give ``RUN/model/`` at the end of pre-training (``write_run_model``).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
from transformers import BertConfig, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from realm.core.checks import Problems
from realm.core.config import load_config
from realm.core.errors import ArgumentError, MissingPackageError, RunError
from realm.data.block_store import BlockStore
from realm.data.packing import SpecialIds
from realm.index import versions
from realm.models.retriever import Retriever, RetrieverConfig
from realm.pretrain.config import PretrainConfig
from realm.pretrain.eval_search import embedded_chunks
from realm.pretrain.model import RealmModel
from realm.pretrain.saved_retriever import is_retriever_folder, load_saved_retriever
from realm.run import live_index
from realm.run.export_index import BLOCKS_FILE, write_blocks_parquet, write_faiss_index
from realm.run.export_st import write_sentence_transformer
from realm.run.layout import CHECKPOINT_PREFIX, CONFIG_FILE, checkpoints_dir
from realm.run.publication import (
    file_entries,
    folder_name,
    list_published,
    new_staging,
    now_iso,
    publish_folder,
    relative_files,
    remove_folder,
    replace_published,
)

logger = logging.getLogger(__name__)

FORMATS = ("hf", "sentence-transformers", "pyserini")
INDEX_SOURCES = ("auto", "current", "exact")
BERT_FAMILY = ("bert",)
"""``model_type``s whose weights are a ``BertModel``'s (MiniLM and most sentence-embedding BERTs say ``bert``): the
embedders and the encoder are BERT classes, so any other backbone would load with random weights."""
MODEL_DIR, ENCODER_DIR, RETRIEVER_DIR = "model", "encoder", "retriever"
"""``RUN/model/encoder`` (hf) and ``RUN/model/retriever`` (sentence-transformers), written by pre-training."""


@dataclass(kw_only=True, slots=True)
class ExportConfig:
    """What ``realm export`` writes, and from which checkpoint."""

    format: str = "sentence-transformers"
    """``hf`` (the encoder), ``sentence-transformers`` (the retriever) or ``pyserini`` (index and blocks)."""
    step: int | None = None
    """Export the checkpoint of this step (default: the newest complete one)."""
    checkpoint: str | None = None
    """Export this checkpoint folder (instead of ``step``)."""
    index: str = "auto"
    """``pyserini`` only: ``current``, the run's live index version (what ``realm inspect`` searches); ``exact``, a
    ``Flat`` index of every block embedded now by the checkpoint's document tower; ``auto``: current when the run
    has one, else exact."""
    overwrite: bool = False
    """Replace OUT when it exists (otherwise an existing, non-empty OUT is an error)."""
    exact_chunk_blocks: int = 65_536
    """``index: exact``: blocks embedded at once; the FAISS index is filled chunk by chunk, so no [N, D] copy of the
    embeddings is held beside it."""

    def __post_init__(self) -> None:
        problems = Problems()
        if self.format not in FORMATS:
            problems.add(f"format must be one of {', '.join(FORMATS)}, got {self.format!r}")
        if self.index not in INDEX_SOURCES:
            problems.add(f"index must be one of {', '.join(INDEX_SOURCES)}, got {self.index!r}")
        if self.step is not None and self.checkpoint is not None:
            problems.add("name a step or a checkpoint folder, not both")
        if self.exact_chunk_blocks < 1:
            problems.add(f"exact_chunk_blocks must be >= 1, got {self.exact_chunk_blocks}")
        problems.raise_if_any()


def check_backbone(init_from: str | None, where: str) -> None:
    """Refuses, in one line, a ``model.init_from`` outside ``BERT_FAMILY``: its weights never fitted the run's BERT
    (checked before the model is built from it, which would fail or load it wrong)."""
    if init_from:
        model_type = BertConfig.get_config_dict(init_from)[0].get("model_type")
        if model_type not in BERT_FAMILY:
            raise RunError(f"{where}: model.init_from={init_from} is a {model_type!r} model; realm exports BERT "
                           f"backbones only ({', '.join(BERT_FAMILY)})")  # fmt: skip


def check_tokenizer(tokenizer: PreTrainedTokenizerBase, where: str) -> None:
    """Refuses a tokenizer that does not wrap a text as ``[CLS] text [SEP]``: the exported towers tokenize with it,
    so they would embed other sequences than the run's embedders did."""
    ids = tokenizer("a")["input_ids"]
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    if cls is None or sep is None or ids[0] != cls or ids[-1] != sep:
        raise RunError(f"{where}: the tokenizer ({type(tokenizer).__name__}) does not wrap a text as [CLS] text [SEP] "
                       "as BERT's does; realm exports BERT backbones only")  # fmt: skip


def write_hf_encoder(model: RealmModel, tokenizer: PreTrainedTokenizerBase, out: Path) -> None:
    """The knowledge-augmented encoder (``BertForMaskedLM``) and its tokenizer in ``out``."""
    model.encoder.save_pretrained(out)
    tokenizer.save_pretrained(out)


def write_model(model: RealmModel, tokenizer: PreTrainedTokenizerBase, cfg: PretrainConfig, fmt: str,
                out: Path) -> None:  # fmt: skip
    """Writes ``model`` in ``fmt`` (``hf`` or ``sentence-transformers``) into the folder ``out``."""
    if fmt not in ("hf", "sentence-transformers"):
        raise ValueError(f"write_model writes hf or sentence-transformers, not {fmt!r}")
    with _quiet_libraries():
        if fmt == "hf":
            write_hf_encoder(model, tokenizer, out)
        else:
            write_sentence_transformer(model.retriever, tokenizer, cfg.retriever, out)


_QUIET_LOGGERS = ("sentence_transformers", "transformers.distributed.tensor_parallel")
"""Loggers whose lines about the export's own scratch folders are noise: sentence-transformers' "Saving model to
.staging-...", and transformers' "layers were not sharded" (it checks a tensor-parallel plan whenever
torch.distributed is up, as in the trainer, though nothing is sharded)."""


@contextlib.contextmanager
def _quiet_libraries() -> Iterator[None]:
    """Off while the export writes a few files (its own result is one line): transformers' "Writing model shards" /
    "Loading weights" bars, and ``_QUIET_LOGGERS`` below ERROR."""
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    levels = {name: logging.getLogger(name).level for name in _QUIET_LOGGERS}
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
        if bars:
            hf_logging.enable_progress_bar()


def _provenance(retriever: RetrieverConfig, fmt: str, step: int | None, run_dir: Path) -> dict[str, Any]:
    return {"format": fmt, "run": str(run_dir.resolve()), "step": step, "share_embedders": retriever.share_embedders,
            "score": retriever.score, "score_scale": retriever.score_scale, "embed_dim": retriever.embed_dim,
            "max_query_length": retriever.max_query_length, "max_block_length": retriever.max_block_length}  # fmt: skip


def write_finished_model(run_dir: str | Path, model: RealmModel, tokenizer: PreTrainedTokenizerBase,
                         cfg: PretrainConfig, step: int, is_main_process: bool) -> dict[str, str]:  # fmt: skip
    """``{"model": RUN/model}`` after ``write_run_model`` when this is the main process of a run that reached
    ``train.max_steps`` (not one stopped early or preempted); ``{}`` otherwise. What ``realm train`` and the
    pipelines' pre-training stage end with."""
    if not is_main_process or step < cfg.train.max_steps:
        return {}
    return {"model": str(write_run_model(run_dir, model, tokenizer, cfg, step))}


def write_run_model(run_dir: str | Path, model: RealmModel, tokenizer: PreTrainedTokenizerBase,
                    cfg: PretrainConfig, step: int) -> Path:  # fmt: skip
    """``RUN/model/encoder`` (hf) and ``RUN/model/retriever`` (sentence-transformers, when the package is
    installed), each replacing the one an earlier invocation of the run wrote. Call from the main process only."""
    run_dir = Path(run_dir)
    folder = run_dir / MODEL_DIR
    check_backbone(cfg.model.init_from, str(run_dir))
    check_tokenizer(tokenizer, str(run_dir))
    for name, fmt in ((ENCODER_DIR, "hf"), (RETRIEVER_DIR, "sentence-transformers")):
        try:
            replace_published(folder / name, lambda staging, fmt=fmt: write_model(model, tokenizer, cfg, fmt, staging),
                              _provenance(cfg.retriever, fmt, step, run_dir))  # fmt: skip
        except MissingPackageError as err:
            logger.info("%s not written (%s)", folder / name, err)
    logger.info("wrote %s: encoder/ (transformers) and retriever/ (sentence-transformers) of step %d", folder, step)
    return folder


def _checkpoint(run_dir: Path, options: ExportConfig) -> str | None:
    """The checkpoint folder ``load_run`` is to read (None: the newest complete one)."""
    if options.step is None:
        return options.checkpoint
    folder = checkpoints_dir(run_dir) / folder_name(CHECKPOINT_PREFIX, options.step)
    steps = [step for step, _ in list_published(checkpoints_dir(run_dir), CHECKPOINT_PREFIX)]
    if options.step not in steps:
        raise RunError(f"{folder} is not a complete checkpoint; the run has steps {steps or 'none'}")
    return str(folder)


def _write_index(loaded, options: ExportConfig, out: Path) -> dict[str, Any]:
    """The pyserini layout of ``loaded``'s run in ``out``; returns what the manifest records of the index."""
    version = None if options.index == "exact" else live_index.current_index_version(loaded.run_dir)
    if version is None and options.index == "current":
        raise RunError(f"{loaded.run_dir} has no live index (index/CURRENT); use --index exact to embed the blocks")
    if version is None:
        exact = _write_exact_index(loaded.model.retriever, loaded.cfg.retriever, loaded.store, loaded.special,
                                   options, out)  # fmt: skip
        return {**exact, "index_step": loaded.step, "blocks": loaded.blocks_path}
    published = versions.load_index_version(version)
    if published.num_vectors != len(loaded.store):
        raise RunError(f"{version} indexes {published.num_vectors} blocks but data.blocks has {len(loaded.store)}")
    write_faiss_index(out, faiss_file=version / versions.FAISS_FILE, block_ids=np.asarray(published.block_ids))
    write_blocks_parquet(loaded.store.blocks, out / BLOCKS_FILE)
    return {"index": str(version), "index_step": published.step, "factory": published.manifest.get("factory", ""),
            "num_blocks": len(loaded.store), "blocks": loaded.blocks_path}  # fmt: skip


def _write_exact_index(retriever: Retriever, cfg: RetrieverConfig, store: BlockStore, special: SpecialIds,
                       options: ExportConfig, out: Path) -> dict[str, Any]:  # fmt: skip
    """A ``Flat`` index of every block embedded now by ``retriever``'s document tower, ``options.exact_chunk_blocks``
    at a time (``realm.pretrain.eval_search.embedded_chunks``), and the blocks, in ``out``."""
    chunks = embedded_chunks(retriever.doc_embedder, store.blocks, special, cfg.max_block_length,
                             options.exact_chunk_blocks)  # fmt: skip
    write_faiss_index(out, embeddings=(chunk.numpy() for chunk in chunks), block_ids=np.arange(len(store)))
    write_blocks_parquet(store.blocks, out / BLOCKS_FILE)
    return {"index": "exact", "factory": "Flat", "num_blocks": len(store)}


def export_run(run_dir: str | Path, out: str | Path, options: ExportConfig) -> Path:
    """Exports ``run_dir`` (a pre-training run, or a bare retriever folder) as ``options.format`` into the new folder
    ``out`` (see the module docstring)."""
    from realm.pretrain.saved_run import load_run

    run_dir, out = Path(run_dir), Path(out)
    if out.exists() and not options.overwrite and (not out.is_dir() or any(out.iterdir())):
        raise ArgumentError(f"{out} exists and is not empty; pass --overwrite to replace it")
    if is_retriever_folder(run_dir):
        return _export_retriever(run_dir, out, options)
    if (run_dir / CONFIG_FILE).is_file():  # note: else load_run says what is missing
        check_backbone(load_config(PretrainConfig, run_dir / CONFIG_FILE).model.init_from, str(run_dir))
    loaded = load_run(run_dir, _checkpoint(run_dir, options))
    check_tokenizer(loaded.tokenizer, str(run_dir))
    manifest = _provenance(loaded.cfg.retriever, options.format, loaded.step, run_dir)
    manifest["checkpoint"] = str(loaded.checkpoint.resolve())
    if options.format == "pyserini":
        return _publish(out, manifest, lambda staging: _write_index(loaded, options, staging))
    return _publish(out, manifest, lambda staging: write_model(loaded.model, loaded.tokenizer, loaded.cfg,
                                                               options.format, staging))  # fmt: skip


def _export_retriever(where: Path, out: Path, options: ExportConfig) -> Path:
    """A bare retriever folder as sentence-transformers, or as pyserini with an exact index over its run's blocks."""
    if options.format == "hf":
        raise ArgumentError(f"{where} is a bare retriever: --format hf exports a pre-training run's MLM encoder, "
                            "which it lacks; use --format sentence-transformers or pyserini")  # fmt: skip
    if options.step is not None or options.checkpoint is not None:
        raise ArgumentError(f"{where} is a bare retriever, one set of weights: --step and --checkpoint name a "
                            "pre-training run's checkpoints")  # fmt: skip
    if options.format == "pyserini" and options.index == "current":
        raise ArgumentError(f"{where} is a bare retriever with no live index: use --index exact (or auto) to embed "
                            "its run's blocks")  # fmt: skip
    saved = load_saved_retriever(where)
    check_tokenizer(saved.tokenizer, str(where))
    manifest = {**_provenance(saved.cfg, options.format, saved.step, saved.run_dir), "retriever": str(where.resolve())}
    if options.format == "pyserini":
        store, special = saved.blocks()
        manifest |= {"index_step": saved.step, "blocks": saved.blocks_path}
        return _publish(out, manifest, lambda staging: _write_exact_index(saved.retriever, saved.cfg, store, special,
                                                                          options, staging))  # fmt: skip
    return _publish(out, manifest, lambda staging: write_sentence_transformer(saved.retriever, saved.tokenizer,
                                                                              saved.cfg, staging))  # fmt: skip


def _publish(out: Path, manifest: dict[str, Any], write: Callable[[Path], Any]) -> Path:
    """``write(staging)`` into a staging folder beside ``out``, then published as ``out`` with ``manifest`` (plus
    what ``write`` returns when it is a dict, the files and their checksums) written last."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = new_staging(out.parent)
    try:
        with _quiet_libraries():
            written = write(staging)
        manifest = {**manifest, **(written if isinstance(written, dict) else {})}
        manifest.update(files=file_entries(staging, relative_files(staging)), created=now_iso())
        if out.exists():  # note: only with --overwrite, or an empty folder
            if any(out.iterdir()):
                remove_folder(out)
            else:
                out.rmdir()
        return publish_folder(staging, out, manifest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
