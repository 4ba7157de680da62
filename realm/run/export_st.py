"""The retriever as a sentence-transformers folder: each tower is Transformer -> Pooling (as trained) -> Dense (the
projection) -> Normalize (the ``cosine`` score only), so ``SentenceTransformer(folder)`` embeds exactly as
``realm.models.retriever.Embedder`` does.

- Shared towers (REALM's default) are one pipeline, written once; separate towers are a ``Router`` with a ``query``
  and a ``document`` route. Either way ``encode_query`` and ``encode_document`` pick the tower and its length.
- Lengths: queries ``[CLS] query [SEP]`` in ``max_query_length`` wordpieces (``query_length``), blocks
  ``[CLS] title [SEP] body [SEP]`` in ``max_block_length`` (``document_length``): pass a block as the pair
  ``(title, text)``, which the tokenizer packs with token types 0 then 1, as ``realm.data.packing.block_batch`` does.
  Plain ``encode`` (no task) truncates at ``max_block_length``.
- The similarity is ``dot`` for the ``inner_product`` score and ``cosine`` for ``cosine``; the run's
  ``score_scale`` (an inverse temperature of p(z|x)) changes no ranking and is recorded in the export's manifest.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import torch
from transformers import BertModel, PreTrainedTokenizerBase

from realm.core.errors import MissingPackageError
from realm.models.retriever import Embedder, Retriever, RetrieverConfig

logger = logging.getLogger(__name__)

SIMILARITY = {"inner_product": "dot", "cosine": "cosine"}
"""The retriever's score -> sentence-transformers' ``similarity_fn_name``."""


def _modules():
    try:
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Pooling, Router, Transformer
    except ImportError as err:
        raise MissingPackageError(f"{err}: the sentence-transformers format needs `pip install "
                                  "'sentence-transformers>=6'`") from None  # fmt: skip
    return SentenceTransformer, Transformer, Pooling, Dense, Normalize, Router


def bare_bert(embedder: Embedder) -> BertModel:
    """The embedder's BERT as a stock ``BertModel`` with its pooler, so ``AutoModel`` loads the folder without
    reporting missing weights. The embedders never use BERT's pooler (they pool the last hidden states), so it is
    zero: its ``pooler_output`` is visibly untrained rather than a random vector."""
    bert = BertModel(embedder.bert.config, add_pooling_layer=True)
    missing, unexpected = bert.load_state_dict(embedder.bert.state_dict(), strict=False)
    if unexpected or any(not name.startswith("pooler.") for name in missing):
        raise ValueError(f"the embedder's BERT does not fit a BertModel: missing {missing}, unexpected {unexpected}")
    with torch.no_grad():
        bert.pooler.dense.weight.zero_()
        bert.pooler.dense.bias.zero_()
    return bert.eval()


def _tower(embedder: Embedder, tokenizer: PreTrainedTokenizerBase, cfg: RetrieverConfig, scratch: Path) -> list:
    """[Transformer, Pooling, Dense, (Normalize)] reproducing ``embedder``."""
    _, Transformer, Pooling, Dense, Normalize, _ = _modules()
    config = embedder.config
    bert_dir = scratch / f"bert-{id(embedder)}"
    bare_bert(embedder).save_pretrained(bert_dir)
    tokenizer.save_pretrained(bert_dir)
    transformer = Transformer(
        str(bert_dir),
        max_seq_length=cfg.max_block_length,
        query_length=cfg.max_query_length,
        document_length=cfg.max_block_length,
    )
    projection = embedder.projection
    modules = [
        transformer,
        Pooling(config.hidden_size, pooling_mode=getattr(config, "pooling", "cls")),
        Dense(projection.in_features, projection.out_features, activation_function=None,
              init_weight=projection.weight.detach().clone(), init_bias=projection.bias.detach().clone()),
    ]  # fmt: skip
    if getattr(config, "score", "inner_product") == "cosine":
        modules.append(Normalize())
    return modules


def write_sentence_transformer(
    retriever: Retriever, tokenizer: PreTrainedTokenizerBase, cfg: RetrieverConfig, out: str | Path
) -> Path:
    """Writes ``retriever`` as a sentence-transformers folder at ``out`` (see the module docstring); the tokenizer
    is also at its top level, so ``AutoTokenizer.from_pretrained(out)`` reads the vocabulary the towers use."""
    SentenceTransformer, *_, Router = _modules()
    out = Path(out)
    score = getattr(retriever.query_embedder.config, "score", "inner_product")
    with tempfile.TemporaryDirectory(prefix="realm-st-") as scratch:
        query = _tower(retriever.query_embedder, tokenizer, cfg, Path(scratch))
        if retriever.shared:
            modules = query
        else:
            document = _tower(retriever.doc_embedder, tokenizer, cfg, Path(scratch))
            modules = [Router.for_query_document(query_modules=query, document_modules=document)]
        model = SentenceTransformer(modules=modules, similarity_fn_name=SIMILARITY[score], device="cpu")
        model.save(str(out))
    if not retriever.shared:
        tokenizer.save_pretrained(out)  # note: the routes keep theirs in query_0_Transformer/, document_0_Transformer/
    return out
