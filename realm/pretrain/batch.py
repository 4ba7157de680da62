"""Batches for pre-training: masked queries from the collator, candidate documents from retrieval.

The collator only tokenises-and-masks (pure CPU, runs in the data loader); candidates are attached by
``realm.pretrain.candidates`` once the live query embedder has searched the index.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from realm.data.masking import MaskingError, MaskingMode, choose_masked_positions, example_rng
from realm.data.packing import Movable, Ragged, SpecialIds, pad


@dataclass
class Candidates(Movable):
    """The K slots of each query: slot 0 is the null document, slots 1.. are retrieved blocks.

    Shapes: B queries, K slots, Ld document length, Lr reader length.
    """

    block_ids: Tensor
    """[B, K] int64 block ids, -1 for the null document and for empty slots."""
    slot_mask: Tensor
    """[B, K] bool, False where no block could fill the slot (tiny corpora); slot 0 is always True."""
    doc_input_ids: Tensor
    """[B, K-1, Ld] ``[CLS] title [SEP] body [SEP]`` of the retrieved blocks, re-embedded with the live embedder."""
    doc_attention_mask: Tensor
    doc_token_type_ids: Tensor
    null_input_ids: Tensor
    """[1, 3] the null document ``[CLS] [SEP] [SEP]`` (embedded once per step and shared by every query)."""
    reader_input_ids: Tensor
    """[B, K, Lr] ``[CLS] masked query [SEP] body [SEP]``; slot 0 has an empty body."""
    reader_attention_mask: Tensor
    reader_token_type_ids: Tensor
    answer_slots: Tensor | None = None
    """[B, K] bool: the slot's body holds the query's masked wordpieces, in order and contiguous (the answer, as
    DPR's top-k accuracy asks of a passage); slot 0, the null document, never does. A diagnostic, not a label."""


@dataclass
class RealmBatch(Movable):
    """Masked queries; ``candidates`` is None until retrieval fills it."""

    query_input_ids: Tensor
    """[B, Lq] ``[CLS] masked sentence [SEP]``: the query embedder's input and the reader's prefix."""
    query_attention_mask: Tensor
    mask_positions: Tensor
    """[B, M] positions in ``query_input_ids`` of the masked wordpieces (0 for padding)."""
    target_ids: Tensor
    """[B, M] original wordpieces at those positions."""
    target_mask: Tensor
    """[B, M] 1 for real targets, 0 for padding."""
    source_uid_hashes: Tensor
    """[B] int64 hash of the sentence's source block uid (0 when it has none); that block, or with
    ``retriever.exclude_source: article`` every block of its article, is never a candidate."""
    example_ids: Tensor
    """[B] row of each example in its dataset (for inspection and exact-resume checks)."""
    candidates: Candidates | None = None

    @property
    def size(self) -> int:
        return self.query_input_ids.shape[0]

    def query_ragged(self) -> Ragged:
        """Each masked query's wordpieces without [CLS]/[SEP] or padding (the first segment of the reader input)."""
        mask = self.query_attention_mask.cpu().numpy().astype(bool)
        count = np.cumsum(mask, axis=1)
        # note: drops each row's first and last kept position, its [CLS] and [SEP]
        inner = mask & (count > 1) & (count < count[:, -1:])
        return Ragged.from_padded(self.query_input_ids.cpu().numpy(), inner)

    def query_tokens(self) -> list[list[int]]:
        """``query_ragged`` as lists."""
        return self.query_ragged().to_lists()

    def target_ragged(self) -> Ragged:
        """Each query's masked wordpieces (the answer), without padding."""
        return Ragged.from_padded(self.target_ids.cpu().numpy(), self.target_mask.cpu().numpy().astype(bool))


class PretrainCollator:
    """Masks one salient span per sentence (or an ablation mode) and packs ``[CLS] sentence [SEP]``.

    Examples are dicts with ``input_ids`` (wordpieces without specials), ``salient_spans``, ``gold_span``,
    ``source_uid_hash``, ``idx`` and ``epoch``. Examples that cannot be masked are rejected and counted in
    ``num_rejected`` rather than trained on unmasked.
    """

    def __init__(self, special: SpecialIds, max_query_length: int, mode: MaskingMode, seed: int) -> None:
        self.special = special
        self.max_query_length = max_query_length
        self.mode = mode
        self.seed = seed
        self.num_rejected = 0

    def __call__(self, examples: Sequence[dict]) -> RealmBatch:
        queries, positions, targets, sources, ids = [], [], [], [], []
        for ex in examples:
            tokens = list(ex["input_ids"])[: self.max_query_length - 2]
            rng = example_rng(self.seed, int(ex.get("epoch", 0)), int(ex["idx"]))
            gold = ex.get("gold_span")
            try:
                masked = choose_masked_positions(
                    len(tokens), ex.get("salient_spans") or [], gold if gold and gold[0] >= 0 else None, self.mode, rng
                )
            except MaskingError:
                self.num_rejected += 1
                continue
            query = list(tokens)
            for p in masked:
                query[p] = self.special.mask
            queries.append([self.special.cls, *query, self.special.sep])
            positions.append([p + 1 for p in masked])  # +1 for [CLS]
            targets.append([tokens[p] for p in masked])
            sources.append(int(ex.get("source_uid_hash", 0)))
            ids.append(int(ex["idx"]))
        if not queries:
            raise MaskingError(f"no example in a batch of {len(examples)} could be masked in mode {self.mode!r}")
        query_ids, query_mask = pad(queries, self.special.pad)
        mask_positions, target_mask = pad(positions, 0)
        target_ids, _ = pad(targets, self.special.pad)
        return RealmBatch(
            query_input_ids=query_ids,
            query_attention_mask=query_mask,
            mask_positions=mask_positions,
            target_ids=target_ids,
            target_mask=target_mask,
            source_uid_hashes=torch.tensor(sources, dtype=torch.long),
            example_ids=torch.tensor(ids, dtype=torch.long),
        )
