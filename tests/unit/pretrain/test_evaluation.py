"""``evaluate_heldout`` on a constructed case whose figures are known by hand: a stand-in model that gets chosen
wordpieces right or wrong, and an index that returns chosen rankings (one of them led by the query's own source
block, which must be dropped)."""

from __future__ import annotations

from types import SimpleNamespace

import datasets
import pytest
import torch

from realm.data.block_store import BlockStore
from realm.data.blocks import BLOCK_FEATURES
from realm.data.packing import SpecialIds
from realm.models.retriever import RetrieverConfig
from realm.pretrain.heldout_eval import evaluate_heldout, heldout_outcomes

SPECIAL = SpecialIds(cls=2, sep=3, pad=0, mask=4)
TITLES = ["A", "A", "B", "B", "C", "D"]
"""Block id -> article title."""
RANKINGS = {0: [0, 2, 4, 5], 1: [0, 2, 4, 5], 2: [4, 0, 2, 5], 3: [5, 0, 2, 4], 4: [1, 2, 4, 5]}
"""Example id -> block ids the index returns, best first."""
GOLD = ["A", "B", "C", "D", "A"]
"""Example id -> its gold article: ex 0 at rank 1, ex 1 at rank 2, ex 2 only in its own (trivial) block, ex 3 rank 1."""


class StandIn(torch.nn.Module):
    """Embeds a query as its example id; with retrieval every masked wordpiece is right except the first one of the
    examples in ``wrong``; closed book only the examples in ``right_closed_book`` are right (both wordpieces)."""

    def __init__(self, wrong: set[int], right_closed_book: set[int]) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.wrong, self.right_closed_book = wrong, right_closed_book
        self.slots_seen: list[list[int]] = []

    def embed_queries(self, batch):
        return batch.example_ids.float()[:, None]

    def forward(self, batch):
        self.slots_seen += batch.candidates.block_ids.tolist()
        retrieval, closed_book = batch.target_ids.clone(), batch.target_ids.clone()
        for row, example in enumerate(batch.example_ids.tolist()):
            if example in self.wrong:
                retrieval[row, 0] += 1
            if example not in self.right_closed_book:
                closed_book[row] += 1
        return SimpleNamespace(predictions=retrieval, closed_book_predictions=closed_book)


class RankingIndex:
    def __init__(self, rankings: dict[int, list[int]] = RANKINGS) -> None:
        self.rankings = rankings

    def search(self, queries: torch.Tensor, k: int):
        ids = torch.tensor([self.rankings[int(q)][:k] for q in queries[:, 0]])
        return torch.zeros(ids.shape), ids


def _store(doc_ids: list[str] = TITLES) -> BlockStore:
    blocks = datasets.Dataset.from_dict(
        {"uid": [f"b{i}" for i in range(6)], "doc_id": doc_ids, "title": TITLES, "text": [""] * 6,
         "title_ids": [[5 + i] for i in range(6)], "body_ids": [[20 + i, 21 + i] for i in range(6)]},
        features=BLOCK_FEATURES,
    )  # fmt: skip
    return BlockStore(blocks)


def _rows() -> datasets.Dataset:
    # every sentence masks a 2-wordpiece gold span; example 2's source block is block 4, its gold article's only block
    return datasets.Dataset.from_dict(
        {"input_ids": [[10 + i, 11, 12, 13, 14] for i in range(5)], "gold_span": [[1, 3]] * 5,
         "source_uid": ["", "", "b4", "", ""]}
    )  # fmt: skip


def test_heldout_figures_match_a_hand_count():
    model = StandIn(wrong={3}, right_closed_book={0})
    cfg = RetrieverConfig(num_candidates=3, num_extra_retrieved=1)  # 2 retrieved blocks per query
    metrics = evaluate_heldout(
        model, _rows(), _store(), SPECIAL, cfg, index=RankingIndex(), batch_size=3, max_examples=4, gold_titles=GOLD
    )
    assert metrics.num_examples == 4 and metrics.k == 2  # the 5th example is cut by max_examples
    assert metrics.span_accuracy == pytest.approx(3 / 4)  # ex 3 has one wordpiece wrong
    assert metrics.token_accuracy == pytest.approx(7 / 8)
    assert metrics.closed_book_span_accuracy == pytest.approx(1 / 4)
    assert metrics.closed_book_token_accuracy == pytest.approx(2 / 8)
    assert metrics.gold_recall_at_1 == pytest.approx(2 / 4)  # ex 0 and 3
    assert metrics.gold_recall_at_k == pytest.approx(3 / 4)  # and ex 1 at rank 2; ex 2's own block is dropped
    assert model.slots_seen[2] == [-1, 0, 2]  # null slot, then the ranking without the trivial block 4
    assert model.training  # evaluation restores the training mode


def test_gold_titles_follow_the_rows_when_truncated():
    """Gold titles are cut with the rows, so each example is scored against its own article."""
    model = StandIn(wrong=set(), right_closed_book=set())
    cfg = RetrieverConfig(num_candidates=2, num_extra_retrieved=1)  # top-1 only
    metrics = evaluate_heldout(
        model, _rows(), _store(), SPECIAL, cfg, index=RankingIndex(), batch_size=2, max_examples=2, gold_titles=GOLD
    )
    assert metrics.gold_recall_at_k == pytest.approx(1 / 2)  # ex 0 (A first) yes, ex 1 (A first, gold B) no
    assert metrics.span_accuracy == 1.0 and metrics.closed_book_span_accuracy == 0.0


def test_another_retrievers_vectors_choose_the_blocks_the_model_reads():
    """``query_vectors`` replaces the model's query embeddings in the search (a BM25 baseline read by the model)."""

    class NoQueries(StandIn):
        def embed_queries(self, batch):
            raise AssertionError("the model's query tower must not be used")

    model = NoQueries(wrong=set(), right_closed_book=set())
    cfg = RetrieverConfig(num_candidates=2, num_extra_retrieved=0)
    metrics = evaluate_heldout(
        model, _rows(), _store(), SPECIAL, cfg, index=RankingIndex(), gold_titles=GOLD,
        query_vectors=lambda batch: 4 - batch.example_ids.float()[:, None],  # example i searches as 4 - i
    )  # fmt: skip
    # ex 0 -> block 1 (A, gold A); 1 -> 5 (D, gold B); 2 -> 4, its own block, dropped with nothing over-retrieved to
    # replace it; 3 -> 0 (A, gold D); 4 -> 0 (A, gold A)
    assert [row[1] for row in model.slots_seen] == [1, 5, -1, 0, 0]
    assert metrics.gold_recall_at_k == pytest.approx(2 / 5)


def test_each_rows_outcome_is_kept_in_row_order():
    """``heldout_outcomes`` keeps what ``evaluate_heldout`` sums: row i's span outcome, closed-book outcome and
    retrieved blocks, across batches."""
    model = StandIn(wrong={1, 3}, right_closed_book={0, 4})
    cfg = RetrieverConfig(num_candidates=3, num_extra_retrieved=1)
    out = heldout_outcomes(model, _rows(), _store(), SPECIAL, cfg, index=RankingIndex(), batch_size=2)
    assert out.span_correct.tolist() == [True, False, True, False, True]
    assert out.closed_book_span_correct.tolist() == [True, False, False, False, True]
    assert out.retrieved.tolist() == [[0, 2], [0, 2], [0, 2], [5, 0], [1, 2]]  # row 2 without its own block 4
    assert (out.tokens_correct, out.closed_book_tokens_correct, out.num_tokens) == (8, 4, 10)


@pytest.mark.parametrize("doc_ids", [TITLES, [f"passage-{i}" for i in range(6)]], ids=["blocks_of_a_document",
                                                                                      "dpr_passages"])
def test_a_held_out_sentence_never_reads_another_block_of_its_own_article(doc_ids):
    """Evaluation drops every block of the sentence's article, whatever pre-training drops: article A is blocks 0
    and 1, cut from one document or (DPR) two passages that share its title; the sentence comes from block 0 and
    the index ranks block 1 first."""
    rows = datasets.Dataset.from_dict({"input_ids": [[10, 11, 12, 13, 14]], "gold_span": [[1, 3]],
                                       "source_uid": ["b0"]})  # fmt: skip
    cfg = RetrieverConfig(num_candidates=3, num_extra_retrieved=2)  # pre-training's default drops the block only
    out = heldout_outcomes(StandIn(set(), set()), rows, _store(doc_ids), SPECIAL, cfg,
                           index=RankingIndex({0: [1, 0, 2, 4, 5]}))  # fmt: skip
    assert out.retrieved.tolist() == [[2, 4]]
