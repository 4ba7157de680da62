"""Reader warm-up on trivial retrievals: the encoder learns to copy a masked span out of the block it came from.

REALM starts its knowledge-augmented encoder from BERT, which can already find a masked fact in a passage it is
handed. An encoder trained from scratch cannot, and REALM's marginal loss is a poor first teacher of that skill:
while the encoder ignores its documents, every slot's p(y|z, x) is the same, the posterior over slots equals the
prior, and the slots without the answer teach "ignore the body" as strongly as the gold slot teaches "read it".

This stage teaches the skill from the knowledge corpus alone, with no retriever and no gold pairs: a sentence of a
block with one salient span masked is read against that same block, its *trivial retrieval*, under REALM's loss on
a single slot. REALM prohibits trivial retrievals during pre-training because they teach the *retriever* to look
for exact string matches; the retriever takes no part here. The blocks of held-out articles give no example
(``realm.data.articles.TrainingBlocksInput.heldout_articles``): read against their own block, their facts could be
memorised before the held-out evaluation asks for them.

The skill appears after a phase change, and late for rare tokens. Measured on the demo world (2-layer, hidden-128
BERT, batch 32, AdamW 1e-3): span accuracy on this task 0.13 at step 500, 0.59 at 700, 0.87 at 1,000, 0.96 at
1,300, 0.99 at 1,600 with the rate held up; a linear decay timed to end at step 1,000 stalls it at 0.75, with years
(the rarest tokens) copied verbatim 10% of the time. REALM pre-training from that stalled encoder reached 0.23
held-out span accuracy; from one trained past the change (years 0.99) 0.56, with the same retriever and steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Sequence

import datasets
import numpy as np
import torch
from torch import Tensor

from realm.data.block_store import BlockStore
from realm.data.masking import MaskingMode
from realm.data.packing import Movable, Ragged, SpecialIds, pack_ragged_pairs, reader_length
from realm.data.sentences import prepare_sentences, split_sentences, without_sentences
from realm.data.tagging import SpanTagger
from realm.models.encoder import KnowledgeAugmentedEncoder
from realm.pretrain.batch import PretrainCollator
from realm.pretrain.loss import accuracy_metrics, marginal_mlm_loss


def skip_unsampled(skipped: np.ndarray | None, num_blocks: int, max_blocks: int, seed: int) -> np.ndarray | None:
    """[N] bool, the blocks whose sentences are not read: the ``skipped`` ones (held-out articles' blocks, or None)
    and, with ``max_blocks`` > 0, every other block but a sample of ``max_blocks`` of them (seeded; all of them when
    there are fewer). So what is split and tagged grows with ``max_blocks``, not with the corpus."""
    if max_blocks <= 0:
        return skipped
    candidates = np.arange(num_blocks) if skipped is None else np.flatnonzero(~skipped)
    if len(candidates) <= max_blocks:
        return skipped
    out = np.ones(num_blocks, dtype=bool)
    out[np.random.default_rng([seed, max_blocks]).choice(candidates, max_blocks, replace=False)] = False
    return out


def block_sentence_records(blocks: datasets.Dataset, heldout: np.ndarray | None = None) -> datasets.Dataset:
    """One row per sentence of every block but the ``heldout`` ones ([N] bool, ``realm.data.articles.heldout_blocks``
    or ``skip_unsampled``): ``text`` (the sentence) and ``block_id`` (the block's row in ``blocks``). Skipped blocks
    are never read."""
    rows = np.arange(len(blocks)) if heldout is None else np.flatnonzero(~heldout)
    kept = blocks if heldout is None else blocks.select(rows)

    def split(batch: dict, indices: list[int]) -> dict:
        texts, block_ids = [], []
        for i, text in zip(indices, batch["text"]):
            for start, end in split_sentences(text):
                texts.append(text[start:end])
                block_ids.append(int(rows[i]))
        return {"text": texts, "block_id": block_ids}

    return kept.map(split, batched=True, with_indices=True, remove_columns=kept.column_names, desc="Splitting blocks")


def prepare_block_sentences(
    blocks: datasets.Dataset, tokenizer, tagger: SpanTagger, max_query_length: int, heldout: np.ndarray | None = None,
    excluded: Collection[str] = (),
) -> datasets.Dataset:
    """Tokenised, tagged block sentences (``realm.data.sentences.SENTENCE_FEATURES``) plus the ``block_id`` each one
    came from, none from a ``heldout`` block (the held-out articles' blocks stay in ``blocks``, so block ids are
    rows of the whole corpus) and none of ``excluded`` (sentences held out one by one); sentences without a salient span are kept here and rejected by the collator, as in
    pre-training."""
    # note: filtered here, with the block ids, not by prepare_sentences(exclude=), which would misalign them
    records = without_sentences(block_sentence_records(blocks, heldout), excluded, "reader warm-up")
    prepared = prepare_sentences(records.remove_columns("block_id"), tokenizer, tagger, max_query_length)
    # note: sliced to a list first: datasets 5's lazy Column is read row by row by add_column (97 s for 292k
    # sentences in the 100k-passage rehearsal, against 0.3 s for the list)
    return prepared.add_column("block_id", records["block_id"][:])


@dataclass
class ReaderBatch(Movable):
    """One slot per query: ``[CLS] masked query [SEP] body [SEP]``. Shapes: B queries, L wordpieces, M masks."""

    input_ids: Tensor
    """[B, L]"""
    attention_mask: Tensor
    token_type_ids: Tensor
    mask_positions: Tensor
    """[B, M] positions of the masked wordpieces in ``input_ids`` (0 for padding)."""
    target_ids: Tensor
    """[B, M] original wordpieces at those positions."""
    target_mask: Tensor
    """[B, M] 1 for real targets."""

    @property
    def size(self) -> int:
        return self.input_ids.shape[0]


class TrivialRetrievalCollator:
    """Masks one salient span per block sentence (``PretrainCollator``) and packs it with its own block's body, or
    with ``store`` None with the null document (an empty body, the query alone as REALM's null slot reads it): the
    closed-book MLM of a model that memorises what it reads.

    Examples are rows of ``prepare_block_sentences`` (or, closed book, of any prepared sentences) with ``idx`` and
    ``epoch`` (``realm.pretrain.data.KeyedExamples``).
    """

    def __init__(
        self, special: SpecialIds, store: BlockStore | None, max_query_length: int, max_block_length: int,
        mode: MaskingMode, seed: int,
    ) -> None:  # fmt: skip
        self.special, self.store, self.max_block_length = special, store, max_block_length
        self.masker = PretrainCollator(special, max_query_length, mode, seed)

    @property
    def num_rejected(self) -> int:
        return self.masker.num_rejected

    def __call__(self, examples: Sequence[dict]) -> ReaderBatch:
        masked = self.masker(examples)
        queries = masked.query_ragged()
        if self.store is None:
            bodies = Ragged.of([[] for _ in range(len(queries))])
        else:
            block_of = {int(ex["idx"]): int(ex["block_id"]) for ex in examples}
            _, bodies = self.store.ragged([block_of[i] for i in masked.example_ids.tolist()])
        reader = pack_ragged_pairs(queries, bodies, self.special, reader_length(queries, self.max_block_length))
        return ReaderBatch(
            input_ids=reader["input_ids"],
            attention_mask=reader["attention_mask"],
            token_type_ids=reader["token_type_ids"],
            mask_positions=masked.mask_positions,
            target_ids=masked.target_ids,
            target_mask=masked.target_mask,
        )


def reader_step(encoder: KnowledgeAugmentedEncoder, batch: ReaderBatch) -> tuple[Tensor, dict[str, Tensor]]:
    """REALM's per-token loss with the trivial retrieval as the only slot (a masked mean NLL), and accuracies.

    Returns:
        (scalar loss, detached ``mlm_accuracy`` over masked wordpieces and ``span_accuracy`` over queries).
    """
    log_probs = encoder(batch.input_ids, batch.attention_mask, batch.token_type_ids, batch.mask_positions)
    token_log_probs = log_probs.gather(-1, batch.target_ids.unsqueeze(-1)).squeeze(-1)  # [B, M]
    slot_logits = torch.zeros(batch.size, 1, device=token_log_probs.device)
    loss = marginal_mlm_loss(slot_logits, token_log_probs.unsqueeze(1), batch.target_mask)
    return loss, accuracy_metrics(log_probs.detach().argmax(-1), batch.target_ids, batch.target_mask)
