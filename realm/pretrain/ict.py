"""Inverse Cloze Task (ORQA): a sentence is the query, its block (usually without it) the positive.

Without this warm start the retriever starts random, the encoder learns to ignore the documents, and retrieval never
gets a learning signal (REALM's cold-start problem).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Sequence

import datasets
import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import Dataset

from realm.data.masking import example_rng
from realm.data.packing import SpecialIds, block_batch, pack_single, pad
from realm.data.sentences import split_sentences
from realm.pretrain.loss import upcast


def ict_loss(
    query_emb: Tensor, block_emb: Tensor, label_offset: int = 0, scale: float = 1.0
) -> tuple[Tensor, Tensor]:
    """In-batch softmax: query i's positive is block ``label_offset + i``, every other block is a negative.

    Args:
        query_emb: [B, D] local queries.
        block_emb: [G, D] blocks of the batch (G = B), or of the global batch gathered from all processes.
        label_offset: where this process's blocks start in ``block_emb``.
        scale: the retriever's inverse temperature (``RetrieverConfig.score_scale``), as in pre-training.

    Returns:
        (scalar cross-entropy loss, scalar accuracy of the in-batch argmax).
    """
    scores = scale * (upcast(query_emb) @ upcast(block_emb).T)  # [B, G]
    labels = torch.arange(scores.shape[0], device=scores.device) + label_offset
    return F.cross_entropy(scores, labels), (scores.argmax(-1) == labels).float().mean().detach()


def block_sentences(text: str, excluded: Collection[str] = ()) -> list[str]:
    """A block's sentences (``split_sentences``) but the ``excluded`` ones (stripped texts held out one by one, the
    reachable held-out cloze's): such a sentence is neither an ICT query nor part of a pseudo-document."""
    sentences = [text[a:b] for a, b in split_sentences(text)]
    return [s for s in sentences if s.strip() not in excluded] if excluded else sentences


class LazyICTExamples(Dataset):
    """ICT examples made when read: the block at a ``(epoch, position)`` key is split into sentences and tokenised in
    ``__getitem__`` (``ICTCollator``'s input), so nothing is prepared up front and memory does not grow with the
    corpus beyond ``rows`` (8 bytes a training block). ``ict_examples`` instead prepares every block before the first
    step, in every process (at 21M blocks: hours and tens of GB of cache, ``configs/ict/base.yaml``).

    A block with fewer than two sentences cannot pose a cloze; its position reads the next block that can (so such a
    block's successor is drawn a little more often), where the eager path drops it from the permutation.
    """

    def __init__(self, blocks: datasets.Dataset, tokenizer, skipped: np.ndarray | None = None,
                 excluded: Collection[str] = frozenset()) -> None:  # fmt: skip
        self.blocks, self.tokenizer, self.excluded = blocks, tokenizer, excluded
        self.rows = np.arange(len(blocks)) if skipped is None else np.flatnonzero(~skipped)
        """[M] the blocks read (all but the ``skipped`` ones: held-out articles' blocks)."""

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, key: tuple[int, int]) -> dict:
        epoch, idx = key
        for offset in range(len(self.rows)):
            row = self.blocks[int(self.rows[(int(idx) + offset) % len(self.rows)])]
            sentences = block_sentences(row["text"], self.excluded)
            if len(sentences) >= 2:
                ids = self.tokenizer(sentences, add_special_tokens=False)["input_ids"]
                return {"title_ids": row["title_ids"], "sentence_ids": ids, "epoch": epoch, "idx": idx}
        raise ValueError("ICT: no training block has two sentences to pose a cloze")


@dataclass
class ICTBatch:
    query_input_ids: Tensor
    query_attention_mask: Tensor
    block_input_ids: Tensor
    block_attention_mask: Tensor
    block_token_type_ids: Tensor

    def to(self, device, non_blocking: bool = False) -> "ICTBatch":
        return ICTBatch(*(t.to(device, non_blocking=non_blocking) for t in vars(self).values()))


class ICTCollator:
    """Examples are dicts with ``title_ids``, ``sentence_ids`` (list of wordpiece lists, >= 2 sentences), ``idx``,
    ``epoch``. The query sentence is removed from its block with probability ``remove_prob`` (0.9 in ORQA).

    With probability ``query_mask_prob`` a run of 1 to ``query_mask_max_span`` of the query's wordpieces becomes
    [MASK]s (never the whole query): REALM's pre-training queries carry their masked salient span, and a query tower
    that never saw [MASK] in ICT lets that run pull every such query the same way (``docs/recipe.md``, point 5).
    """

    def __init__(
        self,
        special: SpecialIds,
        max_query_length: int,
        max_block_length: int,
        remove_prob: float,
        seed: int,
        query_mask_prob: float = 0.0,
        query_mask_max_span: int = 4,
    ) -> None:
        self.special, self.seed, self.remove_prob = special, seed, remove_prob
        self.max_query_length, self.max_block_length = max_query_length, max_block_length
        self.query_mask_prob, self.query_mask_max_span = query_mask_prob, query_mask_max_span

    def _masked(self, sentence: list[int], rng) -> list[int]:
        # note: no draw at all when off, so runs without it keep their batches
        if not self.query_mask_prob or len(sentence) < 2 or rng.random() >= self.query_mask_prob:
            return sentence
        length = rng.randint(1, min(self.query_mask_max_span, len(sentence) - 1))
        start = rng.randrange(len(sentence) - length + 1)
        return sentence[:start] + [self.special.mask] * length + sentence[start + length :]

    def __call__(self, examples: Sequence[dict]) -> ICTBatch:
        queries, titles, contexts = [], [], []
        for ex in examples:
            rng = example_rng(self.seed, int(ex.get("epoch", 0)), int(ex["idx"]))
            sentences = ex["sentence_ids"]
            chosen = rng.randrange(len(sentences))
            keep = rng.random() >= self.remove_prob
            queries.append(pack_single(self._masked(sentences[chosen], rng), self.special, self.max_query_length))
            titles.append(ex["title_ids"])
            contexts.append([t for i, s in enumerate(sentences) if keep or i != chosen for t in s])
        q_ids, q_mask = pad(queries, self.special.pad)
        blocks = block_batch(titles, contexts, self.special, self.max_block_length)
        return ICTBatch(q_ids, q_mask, blocks["input_ids"], blocks["attention_mask"], blocks["token_type_ids"])
