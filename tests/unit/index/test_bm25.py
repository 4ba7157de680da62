"""BM25 as an inner-product search: scores equal the BM25 formula evaluated term by term, and the ranking is the
brute-force one."""

from __future__ import annotations

import math
import random

import pytest
import torch

from realm.index.bm25 import BM25Index

IGNORE = (0, 2, 3, 4)


def _reference(docs, query, k1=1.2, b=0.75):
    """BM25 of every document, straight from the formula (Lucene idf), ignored ids dropped."""
    docs = [[t for t in d if t not in IGNORE] for d in docs]
    avgdl = sum(map(len, docs)) / len(docs)
    scores = []
    for doc in docs:
        score = 0.0
        for term in query:
            if term in IGNORE:
                continue
            df = sum(term in d for d in docs)
            tf = doc.count(term)
            if df == 0 or tf == 0:
                continue
            idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
            score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(doc) / avgdl))
        scores.append(score)
    return scores


def test_scores_and_ranking_match_the_formula():
    rng = random.Random(0)
    docs = [[rng.randrange(0, 30) for _ in range(rng.randrange(1, 25))] for _ in range(40)]
    queries = [[rng.randrange(0, 35) for _ in range(rng.randrange(1, 8))] for _ in range(12)]
    index = BM25Index(docs, vocab_size=35, ignore=IGNORE)
    scores, ids = index.search(index.query_vectors(queries), k=40)
    assert ids.shape == (12, 40) and index.num_vectors == 40
    for row, query in enumerate(queries):
        expected = torch.tensor(_reference(docs, query))
        got = torch.zeros(40).scatter(0, ids[row], scores[row])
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        assert (scores[row][:-1] >= scores[row][1:]).all()  # best first


def test_a_rare_shared_term_outranks_common_ones():
    docs = [[5, 6, 7, 7], [5, 6, 8], [5, 6, 9, 9, 9], [5, 10]]
    index = BM25Index(docs, vocab_size=11)
    _, ids = index.search(index.query_vectors([[5, 6, 9]]), k=2)
    assert ids[0].tolist()[0] == 2  # 9 is in one block only
    assert index.query_vectors([[4]]).sum() == 0  # a term no block has weighs nothing


def test_no_documents_is_an_error():
    with pytest.raises(ValueError, match="at least one document"):
        BM25Index([], vocab_size=3)
