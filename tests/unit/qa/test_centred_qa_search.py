"""QA's search with centred queries (``retrieval.center_queries``): the hub every question ranks first is lost once
the batch's mean query is subtracted, a batch of one searches with its raw query, the candidates' scores stay the raw
ones, and the setting is refused with BM25, which has no queries to centre."""

import numpy as np
import pytest
import torch

from realm.data.packing import SpecialIds
from realm.index.mips import BruteForceIndex, centered_queries
from realm.models.reader import ReaderConfig
from realm.qa.batch import QACollator
from realm.qa.candidates import RetrievalConfig
from realm.qa.datasets import QAExample
from realm.qa.qa_eval import QAContext
from realm.qa.spans import Wordpieces

# note: block 0 scores high for both queries (a hub); each query's own block (1, 2) is second without centring
BLOCKS = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.2], [0.0, 1.0, 0.2]], dtype=np.float32)
QUERIES = torch.tensor([[0.6, 0.0, 1.0], [0.0, 0.6, 1.0]])


def _context(tokenizer, store, center: bool) -> QAContext:
    reader = ReaderConfig(span_hidden_size=8, reader_beam=1, max_question_length=16, max_sequence_length=48)
    return QAContext(store=store, index=BruteForceIndex(torch.from_numpy(BLOCKS)), embeddings=BLOCKS,
                     words=Wordpieces(tokenizer), special=SpecialIds.of(tokenizer), reader=reader,
                     retrieval=RetrievalConfig(center_queries=center))  # fmt: skip


def _attach(ctx, tokenizer, rows, queries):
    examples = [QAExample(question=q, answers=["Berlin"], answers_are_regex=False, id=str(i))
                for i, q in enumerate(["What is the capital of Germany?", "Which business model?"])]  # fmt: skip
    questions = ctx.question_set(examples, beam=1)
    batch = QACollator(questions, ctx.special, ctx.reader.max_question_length)(rows)
    return ctx.attach(batch, queries, questions, beam=1).blocks


@pytest.mark.parametrize("center, expected", [(False, [0, 0]), (True, [1, 2])])
def test_centred_qa_queries_lose_the_hub_that_every_question_ranks_first(tokenizer, store, center, expected):
    blocks = _attach(_context(tokenizer, store, center), tokenizer, [0, 1], QUERIES)
    assert blocks.block_ids[:, 0].tolist() == expected
    # note: centring picks the blocks; the retriever's logits are still the raw query's, from the frozen embeddings
    assert torch.equal(blocks.doc_embeddings[:, 0], torch.from_numpy(BLOCKS[expected]))


def test_a_batch_of_one_question_searches_with_its_raw_query(tokenizer, store):
    assert torch.equal(centered_queries(QUERIES[:1]), QUERIES[:1])  # centring would zero it, and tie every block
    blocks = _attach(_context(tokenizer, store, True), tokenizer, [1], QUERIES[1:])
    assert blocks.block_ids[:, 0].tolist() == [0]


def test_centring_with_bm25_candidates_is_refused_naming_both_fields():
    with pytest.raises(ValueError, match="retrieval.center_queries centres the dense search's queries; bm25"):
        RetrievalConfig(candidates="bm25", center_queries=True)
