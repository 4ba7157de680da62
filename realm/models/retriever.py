"""Query and document embedders: BERT [CLS] -> linear projection, scored by inner product (MIPS).

REALM's relevance is f(x, z) = Embed_input(x) . Embed_doc(z). The original shares one BERT between the two towers
(``share_embedders=True``); keeping it a switch lets ORQA-style separate towers be compared.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import BertConfig, BertModel, BertPreTrainedModel

from realm.core.checks import Problems
from realm.core.errors import ConfigError
from realm.models.pretrained import POOLINGS, LoadsInTrainingDtype, model_pooling, read_bert_config

logger = logging.getLogger(__name__)

SCORES = ("inner_product", "cosine")
INIT_PROJECTIONS = ("random", "identity")
EXCLUDE_SOURCES = ("block", "article")
RETRIEVER_SHAPE_DEFAULTS = {"embed_dim": 128, "pooling": "cls", "score": "inner_product", "score_scale": 1.0}
"""What an embedder's saved config records of its ``RetrieverConfig`` (with the value an older save implies)."""


@dataclass(kw_only=True, slots=True)
class RetrieverConfig:
    """Shape of the retriever and how many candidates it hands to the encoder."""

    embed_dim: int = 128
    """Size of the projected embedding used for MIPS (128 in REALM)."""
    share_embedders: bool = True
    """One BERT for queries and documents, as the original REALM; False gives ORQA-style separate towers."""
    max_query_length: int = 96
    """Wordpieces of a query, [CLS]/[SEP] included (96 in REALM)."""
    max_block_length: int = 288
    """Wordpieces of an embedded block ``[CLS] title [SEP] body [SEP]`` (288 in REALM)."""
    num_candidates: int = 8
    """Slots per query handed to the encoder: the null document in slot 0 plus ``num_candidates - 1`` retrieved."""
    num_extra_retrieved: int = 4
    """Over-retrieval so the slots stay full after the source filter (``exclude_source``) drops trivial candidates;
    a query whose source article has more blocks among its results than this gets fewer (empty slots are masked)."""
    exclude_source: str = "block"
    """What a pre-training query may not retrieve of where its sentence came from (its ``source_uid``): ``block``,
    that block (REALM's trivial-retrieval filter, as the paper and its code drop it), or ``article``, every block of
    that block's article (``realm.data.articles``: the blocks sharing its title, DPR's passages of one article
    included). Held-out evaluation always drops the article, whatever this says."""
    pooling: str = "cls"
    """``cls`` (REALM: the [CLS] vector) or ``mean`` (masked mean over wordpieces) before the projection, or
    ``model``: the pooling ``model.init_from`` was trained with (``realm.models.pretrained.model_pooling``: mean for
    a sentence-transformers folder that says so, cls for a plain BERT; cls without ``init_from``). Saved embedders
    record the resolved ``cls``/``mean``, so they reload unchanged."""
    init_projection: str = "random"
    """How a projection the pretrained folder does not hold starts (``Retriever.from_bert``): ``random``, or
    ``identity`` (needs ``embed_dim`` equal to the BERT's width), so that an embedding starts as the model's own
    pooled sentence embedding instead of a random rotation and rescaling of it."""
    score: str = "inner_product"
    """``inner_product`` (REALM: raw MIPS) or ``cosine``: embeddings are L2-normalised, so MIPS over them (the index
    included) ranks by cosine and f(x, z) is bounded, whatever the model's size."""
    score_scale: float = 1.0
    """Multiplies f(x, z) wherever it enters a softmax (p(z|x), ICT's in-batch softmax, QA's retriever logits): an
    inverse temperature. With ``cosine``, 10 bounds the logits to [-10, 10]: p(z|x) cannot be one-hot before the
    encoder reads, whereas raw inner products after ICT reach 4-80 and put every reader gradient in one slot."""
    explore_slots: int = 0
    """Of the ``num_candidates - 1`` retrieved slots, how many pre-training fills by sampling instead of taking the
    top: drawn without replacement from the rest of the best ``explore_pool`` by softmax(score /
    ``explore_temperature``) (``realm.pretrain.exploration``). A gold article ranked just outside the top-k gets read,
    and so gets a gradient towards it; held-out evaluation and QA always take the top. 0: REALM's top-k."""
    explore_pool: int = 32
    """How many of the best (after the source filter) the explored slots are drawn from."""
    explore_temperature: float = 1.0
    """Temperature of the explored slots' sampling over the pool's scores (higher: flatter)."""
    center_queries: bool = False
    """A hubness correction: the search subtracts the mean query embedding of the batch from each query, so blocks
    that score high for every query (hubs) lose that lead. Only which blocks become candidates changes; their
    scores in p(z|x) are the model's own."""
    frozen: bool = False
    """Pre-training only: the embedders (both towers and their projections) keep their starting weights (e.g. ICT's,
    ``train.init_retriever``): they get no gradient and are left out of the optimizer, so neither Adam nor weight
    decay moves them, while the encoder trains on the same marginal loss (p(z|x) still weights the slots). The index
    built from the initial export then stays exact, so nothing is exported after it and the index is never refreshed
    (``RefreshConfig.schedule``). The control that separates learning to retrieve from learning to read what the start
    retrieves. ``optim.retriever_*`` then have nothing to act on (no ``train/retriever_lr``); ``index/staleness``
    still counts steps since that export, though the index is exact. With ``train.loss=closed_book`` it changes only
    the exports (the loss gives the embedders no gradient anyway). A run resumes only with the setting it was saved
    with. ICT and QA fine-tuning (which always trains the query tower) ignore it."""

    def __post_init__(self) -> None:
        problems = Problems()
        if self.embed_dim <= 0:
            problems.add(f"embed_dim must be positive, got {self.embed_dim}")
        if self.num_candidates < 2:
            problems.add(f"num_candidates must be >= 2 (null document + one retrieved), got {self.num_candidates}")
        if self.num_extra_retrieved < 0:
            problems.add(f"num_extra_retrieved must be >= 0, got {self.num_extra_retrieved}")
        if self.exclude_source not in EXCLUDE_SOURCES:
            problems.add(f"exclude_source must be one of {EXCLUDE_SOURCES}, got {self.exclude_source!r}")
        if self.pooling not in (*POOLINGS, "model"):
            problems.add(f"pooling must be 'cls', 'mean' or 'model', got {self.pooling!r}")
        if self.init_projection not in INIT_PROJECTIONS:
            problems.add(f"init_projection must be one of {INIT_PROJECTIONS}, got {self.init_projection!r}")
        if self.score not in SCORES:
            problems.add(f"score must be one of {SCORES}, got {self.score!r}")
        if self.score_scale <= 0:
            problems.add(f"score_scale must be positive, got {self.score_scale}")
        # note: the best slot is always the top one (and a num_candidates below 2 is reported above)
        if self.num_candidates >= 2 and not 0 <= self.explore_slots <= self.num_candidates - 2:
            problems.add(f"explore_slots must be in [0, num_candidates - 2], got {self.explore_slots}")
        if self.explore_slots and self.explore_pool < self.num_candidates:
            problems.add(f"explore_pool must be >= num_candidates, got {self.explore_pool}")
        if not self.explore_temperature > 0:
            problems.add(f"explore_temperature must be positive, got {self.explore_temperature}")
        if self.max_query_length < 4 or self.max_block_length < 4:
            problems.add("max_query_length and max_block_length must be at least 4 wordpieces")
        problems.raise_if_any()

    @property
    def num_retrieved(self) -> int:
        """Real documents per query (the null document takes the remaining slot)."""
        return self.num_candidates - 1

    @property
    def max_reader_length(self) -> int:
        """The longest reader sequence, ``[CLS] query [SEP] body [SEP]`` for a whole query and block: the bound of
        ``realm.data.packing.reader_length`` (what the attention kernel is chosen for)."""
        return self.max_query_length + self.max_block_length


class Embedder(LoadsInTrainingDtype, BertPreTrainedModel):
    """BERT whose [CLS] (or mean) vector is projected to ``config.embed_dim`` (and L2-normalised for the ``cosine``
    score); ``save_pretrained`` writes safetensors. The config carries pooling, score and scale, so the weights and
    the way their scores are read travel together (builder, fine-tuning, inspection)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.projection = nn.Linear(config.hidden_size, getattr(config, "embed_dim", 128))
        self.post_init()

    @torch.no_grad()
    def set_identity_projection(self) -> None:
        """Projection = identity, so the embedding is the pooled hidden state itself (``embed_dim == hidden_size``)."""
        weight = self.projection.weight
        embed_dim, hidden_size = weight.shape
        if embed_dim != hidden_size:
            raise ValueError(f"an identity projection needs embed_dim {embed_dim} == hidden_size {hidden_size}")
        weight.copy_(torch.eye(embed_dim, dtype=weight.dtype))
        self.projection.bias.zero_()

    def forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        """[N, L] wordpieces -> [N, embed_dim] embeddings."""
        hidden = self.bert(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        if getattr(self.config, "pooling", "cls") == "mean":
            weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
            embedding = self.projection((hidden * weights).sum(1) / weights.sum(1).clamp_min(1.0))
        else:
            embedding = self.projection(hidden[:, 0])
        if getattr(self.config, "score", "inner_product") == "cosine":
            embedding = F.normalize(embedding, dim=-1)
        return embedding

    @property
    def score_scale(self) -> float:
        """The inverse temperature of this embedder's scores (``RetrieverConfig.score_scale``)."""
        return float(getattr(self.config, "score_scale", 1.0))


def resolve_pooling(cfg: RetrieverConfig, init_from: str | Path | None) -> RetrieverConfig:
    """``cfg`` with pooling ``model`` replaced by the pooling ``init_from`` was trained with (``cls`` without one).

    Everything that builds embedders from a run's config resolves with the run's ``model.init_from``, so a run
    reloaded from its config gets the pooling it trained with."""
    if cfg.pooling != "model":
        return cfg
    return replace(cfg, pooling=model_pooling(init_from) if init_from else "cls")


def embedder_config(bert_config: BertConfig, cfg: RetrieverConfig) -> BertConfig:
    """A copy of ``bert_config`` that records the projection size, pooling and score, so ``from_pretrained``
    rebuilds the same embedder."""
    if cfg.pooling not in POOLINGS:
        # note: a bug, not a user error: "model" means a folder's pooling, which only resolve_pooling can read
        raise ValueError(f"pooling {cfg.pooling!r} must be resolved (resolve_pooling) before building an embedder")
    config = BertConfig.from_dict(bert_config.to_dict())
    for name in RETRIEVER_SHAPE_DEFAULTS:
        setattr(config, name, getattr(cfg, name))
    return config


class Retriever(nn.Module):
    """The two embedding towers; ``doc_embedder is query_embedder`` when the embedders are shared."""

    def __init__(self, query_embedder: Embedder, doc_embedder: Embedder | None = None) -> None:
        super().__init__()
        self.query_embedder = query_embedder
        # note: a shared document tower is not registered a second time, so state dicts, optimizers and DDP see
        # each parameter under exactly one name.
        self.separate_doc_embedder = doc_embedder

    @property
    def doc_embedder(self) -> Embedder:
        return self.separate_doc_embedder if self.separate_doc_embedder is not None else self.query_embedder

    @property
    def shared(self) -> bool:
        return self.separate_doc_embedder is None

    @classmethod
    def from_config(cls, bert_config: BertConfig, cfg: RetrieverConfig) -> "Retriever":
        """Random towers of ``bert_config``'s shape; pooling ``model`` is ``cls`` here (no pretrained folder: a
        caller rebuilding a run started from one passes ``resolve_pooling(cfg, init_from)``)."""
        config = embedder_config(bert_config, resolve_pooling(cfg, None))
        query = Embedder(config)
        return cls(query, None if cfg.share_embedders else Embedder(config))

    @classmethod
    def from_bert(cls, name_or_path: str, cfg: RetrieverConfig) -> "Retriever":
        """Both towers from a pretrained BERT (or a saved embedder): pooling ``model`` becomes the folder's own, and
        a projection the folder does not hold starts as ``cfg.init_projection`` says (one it holds is loaded)."""
        cfg = resolve_pooling(cfg, name_or_path)
        bert_config = read_bert_config(name_or_path)
        if cfg.init_projection == "identity" and cfg.embed_dim != bert_config.hidden_size:
            raise ConfigError(f"retriever.init_projection=identity needs embed_dim {cfg.embed_dim} == the hidden_size "
                             f"{bert_config.hidden_size} of {name_or_path}")  # fmt: skip
        config = embedder_config(bert_config, cfg)
        query, new_projection = _pretrained_embedder(name_or_path, config, cfg.init_projection)
        doc = None if cfg.share_embedders else _pretrained_embedder(name_or_path, config, cfg.init_projection)[0]
        projection = f"a new {cfg.init_projection} projection" if new_projection else "its saved projection"
        logger.info("embedders from %s: %s pooling, %s", name_or_path, cfg.pooling, projection)
        return cls(query, doc)

    def forward(
        self,
        query_input_ids: Tensor,
        query_attention_mask: Tensor,
        doc_input_ids: Tensor,
        doc_attention_mask: Tensor,
        doc_token_type_ids: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """([Nq, D] query embeddings, [Nd, D] document embeddings); one call so DDP sees one forward."""
        return self.embed_queries(query_input_ids, query_attention_mask), self.embed_docs(
            doc_input_ids, doc_attention_mask, doc_token_type_ids
        )

    def embed_queries(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        return self.query_embedder(input_ids, attention_mask)

    def embed_docs(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        return self.doc_embedder(input_ids, attention_mask, token_type_ids)

    def save_pretrained(self, path: str | Path) -> None:
        """Writes ``query/`` and ``doc/`` (the builder only needs ``doc/``) plus ``retriever.json``."""
        path = Path(path)
        self.query_embedder.save_pretrained(path / "query")
        self.doc_embedder.save_pretrained(path / "doc")
        (path / "retriever.json").write_text(json.dumps({"share_embedders": self.shared}))

    @classmethod
    def from_pretrained(cls, path: str | Path) -> "Retriever":
        path = Path(path)
        meta_file = path / "retriever.json"
        if not meta_file.is_file():
            raise FileNotFoundError(f"{path} is not a saved retriever (no retriever.json)")
        shared = json.loads(meta_file.read_text())["share_embedders"]
        query = Embedder.from_pretrained(path / "query")
        return cls(query, None if shared else Embedder.from_pretrained(path / "doc"))


def _pretrained_embedder(name_or_path: str, config: BertConfig, init_projection: str) -> tuple[Embedder, bool]:
    """(the embedder, whether its projection is new: the folder held none)."""
    embedder, info = Embedder.from_pretrained(name_or_path, config=config, output_loading_info=True)
    new_projection = "projection.weight" in info["missing_keys"]
    if new_projection and init_projection == "identity":
        embedder.set_identity_projection()
    return embedder, new_projection


def retrieval_scores(query_emb: Tensor, doc_emb: Tensor, scale: float = 1.0) -> Tensor:
    """Relevance logits ``scale * f(x, z)``: [B, D] queries x [B, K, D] candidates -> [B, K] (scaled inner products
    of the embeddings, which the ``cosine`` score has already normalised)."""
    return scale * torch.einsum("bd,bkd->bk", query_emb, doc_emb)
