"""Fixed candidate blocks for QA (``retrieval.candidates=bm25``): BM25's ranking of each question is bm25s' own,
``attach_blocks`` reads exactly those blocks in that order without searching the index, and a bad setting or a
missing package is refused with a message that names it."""

import os
import sys

import numpy as np
import pytest
import torch

from realm.core.errors import MissingPackageError
from realm.data.packing import SpecialIds, pack_pair
from realm.index.mips import BruteForceIndex
from realm.index.text_bm25 import TextBM25
from realm.models.reader import ReaderConfig
from realm.qa.batch import QACollator, QuestionSet
from realm.qa.candidates import RetrievalConfig
from realm.qa.datasets import QAExample
from realm.qa.qa_eval import QAContext
from realm.qa.spans import Wordpieces
from tests.unit.conftest import BLOCKS

bm25s = pytest.importorskip("bm25s")
Stemmer = pytest.importorskip("Stemmer")

# note: each question shares its rarest words with one block (the conftest store: France, Germany, Franchise)
QUESTIONS = [
    "What is the capital of Germany?",
    "Which business model is not a country?",
    "Is Paris, the capital of France, in Europe, like Berlin?",
]
BEST = [1, 2, 0]


class NoSearch:
    """An index that must not be searched: fixed candidates replace the search."""

    def search(self, queries, k):
        raise AssertionError("the index was searched")


def _context(tokenizer, store, candidates: str, index=None) -> QAContext:
    reader = ReaderConfig(span_hidden_size=8, reader_beam=2, max_question_length=16, max_sequence_length=48)
    embeddings = np.random.default_rng(0).standard_normal((len(store), 4)).astype(np.float32)
    return QAContext(store=store, index=index or NoSearch(), embeddings=embeddings, words=Wordpieces(tokenizer),
                     special=SpecialIds.of(tokenizer), reader=reader,
                     retrieval=RetrievalConfig(candidates=candidates))  # fmt: skip


def _examples() -> list[QAExample]:
    return [QAExample(question=q, answers=["Berlin"], answers_are_regex=False, id=str(i))
            for i, q in enumerate(QUESTIONS)]  # fmt: skip


def test_bm25_candidates_are_bm25s_own_ranking_of_title_and_text(tokenizer, store):
    questions = _context(tokenizer, store, "bm25").question_set(_examples(), beam=5)
    # brute force: bm25s' score of every block for each question, then sorted
    stemmer = Stemmer.Stemmer("english")
    bm25 = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
    docs = bm25s.tokenize([f"{t} {x}" for t, x in BLOCKS], stopwords="en", stemmer=stemmer, show_progress=False)
    bm25.index(docs, show_progress=False)
    for question, row, best in zip(QUESTIONS, questions.candidates, BEST):
        words = bm25s.tokenize([question], stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)[0]
        scores = bm25.get_scores(words)
        assert len(set(scores.tolist())) == len(BLOCKS)  # no ties, so the order is unique
        assert row.tolist() == [*np.argsort(-scores).tolist(), -1, -1]  # a beam of 5 over 3 blocks: padded
        assert row[0] == best


def test_attach_blocks_reads_the_fixed_candidates_in_order_and_never_searches(tokenizer, store):
    ctx = _context(tokenizer, store, "bm25")
    candidates = np.array([[2, 0, 1], [1, 2, -1]])
    questions = QuestionSet(_examples()[:2], tokenizer, ctx.reader.max_question_length, candidates)
    batch = QACollator(questions, ctx.special, ctx.reader.max_question_length)([1, 0])
    blocks = ctx.attach(batch, None, questions, beam=3).blocks  # note: no query pass is needed for fixed candidates
    assert blocks.block_ids.tolist() == [[1, 2, -1], [2, 0, 1]]
    assert blocks.block_valid.tolist() == [[True, True, False], [True, True, True]]
    assert torch.equal(blocks.doc_embeddings[1], torch.from_numpy(ctx.embeddings[[2, 0, 1]]))
    _, bodies = store.tokens(range(len(store)))
    for b, row in enumerate([1, 0]):
        for k, block in enumerate(candidates[row, : ctx.reader.reader_beam]):
            pair, _ = pack_pair(questions.question_ids[row], bodies[block], ctx.special, ctx.reader.max_sequence_length)
            assert blocks.reader_input_ids[b, k, : len(pair)].tolist() == pair


def test_dense_candidates_still_come_from_the_index(tokenizer, store):
    ctx = _context(tokenizer, store, "dense")
    index = BruteForceIndex(torch.from_numpy(ctx.embeddings))
    ctx.index = index
    questions = ctx.question_set(_examples(), beam=3)
    assert questions.candidates is None
    query = torch.randn(3, 4)
    batch = QACollator(questions, ctx.special, ctx.reader.max_question_length)([0, 1, 2])
    assert torch.equal(ctx.attach(batch, query, questions, beam=3).blocks.block_ids, index.search(query, 3)[1])


def test_the_dense_search_without_query_embeddings_is_refused(tokenizer, store):
    ctx = _context(tokenizer, store, "dense")
    questions = ctx.question_set(_examples(), beam=3)
    batch = QACollator(questions, ctx.special, ctx.reader.max_question_length)([0])
    with pytest.raises(ValueError, match="no fixed candidates, so the index search needs query embeddings"):
        ctx.attach(batch, None, questions, beam=3)


def test_a_beam_deeper_than_the_candidates_is_refused(tokenizer, store):
    ctx = _context(tokenizer, store, "bm25")
    questions = QuestionSet(_examples(), tokenizer, 16, np.zeros((3, 2), dtype=np.int64))
    batch = QACollator(questions, ctx.special, 16)([0])
    with pytest.raises(ValueError, match="2 candidates per question, fewer than the beam of 3"):
        ctx.attach(batch, torch.zeros(1, 4), questions, beam=3)


def test_bm25_mode_refuses_a_question_set_built_without_candidates(tokenizer, store):
    ctx = _context(tokenizer, store, "bm25")
    questions = QuestionSet(_examples(), tokenizer, 16)
    batch = QACollator(questions, ctx.special, 16)([0])
    with pytest.raises(ValueError, match="QAContext.question_set"):
        ctx.attach(batch, torch.zeros(1, 4), questions, beam=3)


def test_an_unknown_candidate_source_is_refused_naming_the_field():
    with pytest.raises(ValueError, match=r"retrieval\.candidates must be one of \('dense', 'bm25'\), got 'tfidf'"):
        RetrievalConfig(candidates="tfidf")


def test_a_missing_bm25s_is_a_user_error_saying_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "bm25s", None)  # note: importing a None entry raises ImportError
    with pytest.raises(MissingPackageError, match="pip install bm25s PyStemmer"):
        TextBM25(["a block"])


def test_bm25_leaves_the_gpu_to_torch_unless_the_user_set_jax_preallocation(monkeypatch):
    # note: bm25s imports JAX where installed, and JAX would take 75% of a GPU's memory at its first use
    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    TextBM25(["a block about rivers", "a block about mountains"])
    assert os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "true")
    TextBM25(["a block about rivers"])
    assert os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "true"
