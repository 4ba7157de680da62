"""A bare retriever folder read back for export: ``realm ict``'s ``OUT/retriever`` or a trainer's
``RUN/retriever/step-N`` (``query/``, ``doc/``, ``retriever.json``, a manifest), with what it does not hold itself.

Such a folder has the two towers but neither the tokenizer nor the lengths they embed with, nor the blocks; those
come from the config of the run that wrote it (``OUT/config.yaml`` for ICT, ``RUN/config.yaml`` for a trainer's
export): its ``data.tokenizer``, ``data.blocks`` and ``retriever`` section, paths read where the run's move took
them (``realm.run.paths.locate``). Any job's config has those keys, whichever job wrote it, so the YAML is read as
such rather than as one job's config class.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from transformers import PreTrainedTokenizerBase

from realm.core.config import from_dict, read_yaml
from realm.core.errors import RunError
from realm.data.block_store import BlockStore
from realm.data.blocks import check_blocks_tokenizer, load_blocks
from realm.data.packing import SpecialIds
from realm.data.vocab import load_tokenizer
from realm.models.retriever import Retriever, RetrieverConfig
from realm.run.layout import CONFIG_FILE
from realm.run.paths import locate, recorded_run_dir
from realm.run.publication import read_manifest, verify_published

RETRIEVER_META = "retriever.json"
"""The file ``Retriever.save_pretrained`` writes beside ``query/`` and ``doc/``: what marks a retriever folder."""


@dataclass
class SavedRetriever:
    """A retriever folder and what its run's config says about it."""

    folder: Path
    run_dir: Path
    """The run whose ``config.yaml`` supplied the tokenizer, the blocks and the retriever section."""
    retriever: Retriever
    cfg: RetrieverConfig
    tokenizer: PreTrainedTokenizerBase
    step: int | None
    """The trainer's step of the export, or ICT's number of steps (None when the manifest says neither)."""
    blocks_path: str

    def blocks(self) -> tuple[BlockStore, SpecialIds]:
        """The run's blocks (read only when asked: the sentence-transformers format needs none), checked against
        the tokenizer."""
        if not self.blocks_path or not Path(self.blocks_path).is_dir():
            raise RunError(f"data.blocks={self.blocks_path!r} of {self.run_dir / CONFIG_FILE} not found")
        check_blocks_tokenizer(self.blocks_path, self.tokenizer)
        return BlockStore(load_blocks(self.blocks_path)), SpecialIds.of(self.tokenizer)


def is_retriever_folder(path: str | Path) -> bool:
    return (Path(path) / RETRIEVER_META).is_file()


def owning_run(folder: Path) -> Path:
    """The run directory that wrote ``folder``: the nearest of its parent (ICT's ``OUT/retriever``) and grandparent
    (the trainer's ``RUN/retriever/step-N``) that holds a ``config.yaml``."""
    for run in (folder.parent, folder.parent.parent):
        if (run / CONFIG_FILE).is_file():
            return run
    raise RunError(f"{folder} is a retriever folder, but neither {folder.parent} nor {folder.parent.parent} holds "
                   f"the {CONFIG_FILE} of the run that wrote it (its tokenizer, lengths and blocks are named there)")


def load_saved_retriever(folder: str | Path) -> SavedRetriever:
    """The retriever in ``folder`` (its files checked against its manifest), with its run's tokenizer and shape."""
    folder = Path(folder)
    run = owning_run(folder)
    config_file = run / CONFIG_FILE
    config = read_yaml(config_file)
    recorded = recorded_run_dir(config_file)
    data = config.get("data") or {}
    where = lambda key: locate(str(data.get(key) or ""), recorded, run)  # noqa: E731
    cfg = from_dict(RetrieverConfig, config.get("retriever") or {}, where=f"{config_file}: retriever")
    try:
        verify_published(folder)
        retriever = Retriever.from_pretrained(folder).eval()
    except (OSError, ValueError) as err:
        raise RunError(f"{folder}: {err}") from None
    try:
        tokenizer = load_tokenizer(where("tokenizer"))
    except (OSError, ValueError) as err:
        raise RunError(f"data.tokenizer of {config_file}: {err}") from None
    manifest = read_manifest(folder) or {}
    step = manifest.get("step", manifest.get("steps"))
    return SavedRetriever(folder, run, retriever, cfg, tokenizer, step, where("blocks"))
