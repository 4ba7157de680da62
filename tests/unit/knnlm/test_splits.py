"""Evaluation splits: whole articles cut by size whatever the file order, shared articles refused with a count and an
example; the token n-gram overlap equals brute-force enumeration, invents nothing on a hash collision, and refuses
(or reports) a leaked split."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from realm.core.errors import ConfigError, DataFileError
from realm.data.corpus import CorpusConfig, Document
from realm.knnlm import overlap as ov
from realm.knnlm.splits import article_ids, assign_articles, check_disjoint, read_articles


def test_articles_are_cut_by_cumulative_size_whatever_their_order():
    sizes = [(f"article {i}", 10 + i % 7) for i in range(300)]
    shares = {"test": 0.1, "validation": 0.1}
    split = assign_articles(sizes, shares, rest="train")
    assert split == assign_articles(list(reversed(sizes)), shares, rest="train")  # file order does not matter
    assert set(split) == {a for a, _ in sizes}
    total, size = sum(s for _, s in sizes), dict(sizes)
    for name, share in shares.items():
        words = sum(size[a] for a, part in split.items() if part == name)
        assert abs(words / total - share) <= max(size.values()) / total  # exact up to one article
    with pytest.raises(ConfigError, match="sum to at most 1"):
        assign_articles(sizes, {"a": 0.7, "b": 0.6}, rest="c")
    with pytest.raises(ConfigError, match="must not also have a share"):
        assign_articles(sizes, {"a": 0.5}, rest="a")


def test_splits_that_share_an_article_are_refused_with_the_count_and_one_example():
    check_disjoint({"validation": ["A", "A", "B"], "test": ["C"], "datastore": ["D", "E"]})
    with pytest.raises(ConfigError, match=r"validation and test share 2 article\(s\) \(e.g. 'B'\)"):
        check_disjoint({"validation": ["A", "B", "C"], "test": ["C", "B", "Z"]})
    with pytest.raises(ConfigError, match="test and datastore share 1"):
        check_disjoint({"validation": ["A"], "test": ["B"], "datastore": ["B", "Q"]})


def test_a_document_without_an_article_is_a_clear_error(tmp_path):
    docs = [Document(id="1", title="Paris", text="x"), Document(id="2", title=" ", text="y", where="v.jsonl:2")]
    with pytest.raises(DataFileError, match=r"v.jsonl:2: 1 of 2 documents of --valid have no title.*valid.title_field"):
        article_ids(docs, "valid")
    path = tmp_path / "v.jsonl"
    path.write_text("".join(json.dumps({"id": i, "art": f"a{i // 2}", "text": f"text {i}"}) + "\n" for i in range(4)))
    texts, ids = read_articles(CorpusConfig(path=str(path), title_field="art"), "valid")
    assert texts == ["text 0", "text 1", "text 2", "text 3"] and ids == ["a0", "a0", "a1", "a1"]


def _brute_force_covered(doc: list[int], reference: list[int], n: int) -> set[int]:
    grams = {tuple(reference[i : i + n]) for i in range(len(reference) - n + 1)}
    covered = set()
    for i in range(len(doc) - n + 1):
        if tuple(doc[i : i + n]) in grams:
            covered.update(range(i, i + n))
    return covered


@pytest.mark.parametrize("n", [2, 3, 5])
def test_overlap_equals_brute_force_enumeration(n):
    rng = np.random.default_rng(n)
    reference = rng.integers(0, 3, 400)  # a 3-token vocabulary: many shared n-grams
    docs = [np.concatenate([[99], rng.integers(0, 3, length)]) for length in (1, 4, 30, 80)]  # [BOS] tokens
    found = ov.measure_overlap(docs, ov.NgramIndex(reference, n, "datastore"), "test")
    expected = [_brute_force_covered(d[1:].tolist(), reference.tolist(), n) for d in docs]
    assert found.num_covered == sum(len(c) for c in expected)
    assert found.num_tokens == sum(len(d) - 1 for d in docs)
    assert found.num_unchecked == sum(len(d) - 1 for d in docs if len(d) - 1 < n)
    first = next(i for i, c in enumerate(expected) if c)
    assert found.example_document == first and found.example_position == min(expected[first])
    assert found.num_documents_hit == sum(bool(c) for c in expected)


def test_the_bos_is_not_compared_and_no_overlap_is_zero():
    reference = np.arange(100)
    docs = [np.array([7, 100, 101, 102, 103]), np.array([3, 4, 5, 6, 100])]  # with its BOS, 3 4 5 6 would match
    found = ov.measure_overlap(docs, ov.NgramIndex(reference, 4), "test")
    assert found.num_covered == 0 and found.fraction == 0.0 and found.example_document == -1
    assert ov.measure_overlap([np.array([0, 5, 6, 7, 8])], ov.NgramIndex(reference, 4), "t").num_covered == 4


def test_a_hash_collision_invents_no_overlap(monkeypatch):
    monkeypatch.setattr(ov, "ngram_hashes", lambda tokens, n: np.zeros(max(len(tokens) - n + 1, 0), np.uint64))
    reference = np.arange(50)
    found = ov.measure_overlap([np.array([0, 60, 61, 62, 63, 64])], ov.NgramIndex(reference, 3), "t")
    assert found.num_covered == 0  # every hash collides, and the token-by-token check rejects each


def test_a_leaked_split_is_refused_or_reported(caplog):
    reference = np.arange(200)
    index = ov.NgramIndex(reference, 8, "datastore")
    leaked = ov.measure_overlap([np.arange(-1, 40), np.array([0, 500, 501, 502])], index, "x")
    assert leaked.num_covered == 40 and leaked.num_tokens == 43
    with pytest.raises(ConfigError, match=r"x vs datastore: 40 of 43 evaluation tokens \(93.02%, in 1 documents\).*"
                                          r"e.g. document 0 at token 0: 'T0 T1"):
        ov.enforce(leaked, ov.OverlapConfig(ngram=8), decode=lambda ids: " ".join(f"T{i}" for i in ids))
    with caplog.at_level(logging.WARNING):
        assert ov.enforce(leaked, ov.OverlapConfig(ngram=8, action="report")) is True
    assert "reported, not refused" in caplog.text
    assert ov.enforce(leaked, ov.OverlapConfig(ngram=8, max_fraction=0.95)) is False
    for bad in ({"ngram": 1}, {"max_fraction": 1.5}, {"action": "ignore"}):
        with pytest.raises(ValueError):
            ov.OverlapConfig(**bad)
