"""What fine-tuning starts from and what it leaves behind, shared by ``realm finetune`` and ``realm evaluate``.

A QA run directory ``OUT/``:

    tokenizer/                 the tokenizer (copied, so the folder is self-contained)
    retriever/step-00000000/   the starting document embedder (an export, as in pre-training)
    index/v-00000000/ CURRENT  the frozen index built from it by the index builder's own code
    model/                     the fine-tuned query embedder + reader, published atomically (manifest last)
    eval/NAME/                 predictions.jsonl and metrics.json of each evaluation
    metrics.jsonl config.yaml

The starting point is one of: a pre-training run (reader = its encoder's BERT, query tower = its query embedder,
index = its document embedder over its blocks), any BERT by name or folder (ORQA-style, both towers and the reader
from it), or a model built from the ``model`` section (tests). ``init_retriever`` replaces the embedders.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from pathlib import Path

from realm.core.checks import Problems
from realm.core.errors import ConfigError, MissingFileError
from realm.data.block_store import BlockStore
from realm.data.blocks import BlocksInput, load_blocks
from realm.data.packing import SpecialIds
from realm.data.vocab import load_tokenizer
from realm.index import versions
from realm.index.build_version import blocks_fingerprint, build_index_version
from realm.index.mips import IndexConfig
from realm.models.bert import ModelConfig
from realm.models.pretrained import read_bert_config
from realm.models.reader import ReaderConfig, SpanReader, reader_config
from realm.models.retriever import Embedder, Retriever, RetrieverConfig
from realm.qa.candidates import RetrievalConfig
from realm.qa.model import OpenQAModel
from realm.qa.qa_eval import QAContext
from realm.qa.spans import Wordpieces
from realm.run import layout, live_index, publication
from realm.run.paths import missing_path_error

logger = logging.getLogger(__name__)

MODEL_DIR = "model"
TOKENIZER_DIR = "tokenizer"


@dataclass(kw_only=True, slots=True)
class InitConfig:
    """Where the fine-tuned networks and the frozen index come from."""

    run: str = ""
    """A pre-training run directory (``realm train`` / ``realm demo``); its tokenizer and blocks are used too."""
    checkpoint: str = ""
    """With ``run``: the checkpoint folder (default: its newest complete one)."""
    bert: str = ""
    """Instead of ``run``: any BERT (hub name or folder) for the reader and both embedders."""
    retriever: str = ""
    """A saved retriever (``realm ict``'s ``retriever/`` or ``RUN/retriever/step-*``) replacing the embedders; it
    carries its own shape, so the ``retriever`` section's ``embed_dim`` and ``pooling`` do not apply."""
    index: str = ""
    """A published index version (``RUN/index/v-*``) over the same blocks to use as the frozen index; by default the
    starting document embedder embeds the blocks once (for 13M blocks, pass the pre-training run's last version)."""

    def __post_init__(self) -> None:
        problems = Problems()
        if self.run and self.bert:
            problems.add("init.run and init.bert are alternatives; set one")
        if self.checkpoint and not self.run:
            problems.add("init.checkpoint needs init.run")
        problems.raise_if_any()


@dataclass
class Start:
    """The networks and data fine-tuning starts from."""

    model: OpenQAModel
    doc_embedder: Embedder
    tokenizer_path: str
    blocks_path: str
    max_block_length: int
    centred_search: bool = False
    """Whether the retriever was trained searching with centred queries (a pre-training run's
    ``retriever.center_queries``): what QA's search does unless ``retrieval.center_queries`` says otherwise."""


def starting_point(
    init: InitConfig, data: BlocksInput, model_cfg: ModelConfig, retriever_cfg: RetrieverConfig, reader: ReaderConfig
) -> Start:
    """Builds the QA model (and the document embedder the frozen index comes from) as ``init`` says; ``data`` names
    the tokenizer and blocks (by default a run's own)."""
    if init.run:
        from realm.pretrain.saved_run import load_run

        run = load_run(init.run, init.checkpoint or None)
        bert = run.model.encoder.mlm.bert
        qa_reader = SpanReader(reader_config(bert.config, reader.span_hidden_size))
        qa_reader.bert.load_state_dict(bert.state_dict())
        retriever = run.model.retriever
        tokenizer_path, blocks_path = data.tokenizer or run.tokenizer_path, data.blocks or run.blocks_path
        max_block_length = run.cfg.retriever.max_block_length
        centred_search = run.cfg.retriever.center_queries
        logger.info("starting from %s (step %d)", run.checkpoint, run.step)
    else:
        centred_search = False
        if not data.blocks:
            raise ConfigError("data.blocks is required unless init.run is set")
        blocks_path, max_block_length = data.blocks, retriever_cfg.max_block_length
        if init.bert:
            tokenizer_path = data.tokenizer or init.bert
            config = reader_config(read_bert_config(init.bert), reader.span_hidden_size)
            qa_reader = SpanReader.from_pretrained(init.bert, config=config)
            retriever = None if init.retriever else Retriever.from_bert(init.bert, retriever_cfg)
        else:
            if not data.tokenizer:
                raise ConfigError("data.tokenizer is required unless init.run or init.bert is set")
            tokenizer_path = data.tokenizer
            bert_config = model_cfg.bert_config(len(load_tokenizer(tokenizer_path)))
            qa_reader = SpanReader(reader_config(bert_config, reader.span_hidden_size))
            retriever = None if init.retriever else Retriever.from_config(bert_config, retriever_cfg)
    if init.retriever:
        # note: a saved retriever carries its own shape; the retriever section's embed_dim/pooling do not apply
        retriever = Retriever.from_pretrained(init.retriever)
        logger.info("embedders from %s (embed_dim %d, pooling %s)", init.retriever,
                    retriever.query_embedder.config.embed_dim, getattr(retriever.query_embedder.config, "pooling", "cls"))  # fmt: skip
    # note: the query tower is trained while the document side stays frozen, so a shared tower is split in two
    query = copy.deepcopy(retriever.query_embedder)
    return Start(OpenQAModel(query, qa_reader, reader.max_span_width), retriever.doc_embedder, tokenizer_path,
                 blocks_path, max_block_length, centred_search)  # fmt: skip


def frozen_index(out_dir: Path, start: Start, init: InitConfig, index_cfg: IndexConfig, *, build: bool = True):
    """The frozen index: ``init.index`` after checking it covers the same blocks, or the one built (once, when
    ``build``: the main process) in ``out_dir`` from the starting document embedder with the index builder's code."""
    if init.index:
        published = versions.load_index_version(Path(init.index), cfg=index_cfg)
        if published.manifest.get("corpus_fingerprint") != blocks_fingerprint(load_blocks(start.blocks_path)):
            raise ConfigError(f"init.index {init.index} was built over other blocks than {start.blocks_path}")
        return published
    if build:
        export = layout.export_retriever(
            out_dir,
            0,
            Retriever(start.doc_embedder),
            blocks_path=start.blocks_path,
            tokenizer_path=start.tokenizer_path,
            max_block_length=start.max_block_length,
        )
        version = build_index_version(out_dir, 0, export, index_cfg)
    else:
        version = live_index.current_index_version(out_dir)
        if version is None:
            raise FileNotFoundError(f"{out_dir} has no frozen index (the main process builds it)")
    return versions.load_index_version(version, cfg=index_cfg)


def index_blocks(index: versions.PublishedIndex, override: str = "", option: str = "--blocks") -> str:
    """The blocks the frozen ``index`` was built over: ``override`` when given, else where its manifest records them
    (found after a move of the run, ``realm.run.paths``); a ``MissingFileError`` naming ``option`` when neither
    exists."""
    blocks = override or index.manifest.get("blocks", "")
    if not blocks or not Path(blocks).exists():
        where = "the override" if override else str(index.path / publication.MANIFEST)
        raise MissingFileError(missing_path_error("blocks", blocks, where, f"{option}=PATH"))
    return blocks


def qa_context(
    index: versions.PublishedIndex, tokenizer, reader: ReaderConfig, retrieval: RetrievalConfig, blocks: str = ""
) -> QAContext:
    """What evaluation and training read besides the model: the frozen index, its blocks (``index_blocks``:
    ``blocks`` overrides where the index's manifest records them), wordpieces and the reader's shape."""
    blocks = load_blocks(index_blocks(index, blocks), tokenizer)  # note: ids outside the vocabulary, one line here
    return QAContext(
        store=BlockStore(blocks),
        index=index,
        embeddings=index.embeddings(),
        words=Wordpieces(tokenizer),
        special=SpecialIds.of(tokenizer),
        reader=reader,
        retrieval=retrieval,
    )
