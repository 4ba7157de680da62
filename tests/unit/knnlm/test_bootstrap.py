"""The paired bootstrap of a perplexity difference: exact in the cases with a known answer, its resamples drawn as
enumeration says, its interval covering a known offset about as often as it claims, narrowing with more tokens."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pytest
import torch

from realm.knnlm.bootstrap import BootstrapConfig, paired_bootstrap, resampled_means


def _log_probs(num_tokens: int, seed: int = 0) -> np.ndarray:
    return np.log(np.random.default_rng(seed).uniform(0.01, 0.9, num_tokens))


def test_identical_systems_give_exactly_zero_and_a_zero_width_interval():
    a = _log_probs(500)
    result = paired_bootstrap(a, a.copy(), BootstrapConfig(num_resamples=300))
    assert result.relative_change == 0.0 and result.ci_low == 0.0 and result.ci_high == 0.0
    assert result.ppl_a == result.ppl_b and not result.excludes_zero


def test_a_constant_shift_gives_its_known_change_at_both_ends():
    a = _log_probs(400)
    b = a - 0.25  # every token 0.25 nats less likely under b: ppl_b = ppl_a * exp(0.25)
    result = paired_bootstrap(torch.from_numpy(a), torch.from_numpy(b), BootstrapConfig(num_resamples=200))
    expected = math.expm1(0.25)
    for value in (result.relative_change, result.ci_low, result.ci_high, result.ppl_b / result.ppl_a - 1):
        assert math.isclose(value, expected, rel_tol=1e-9)
    assert math.isclose(result.ppl_a, math.exp(-a.mean()), rel_tol=1e-12) and result.excludes_zero


def test_token_resamples_are_drawn_as_enumerating_every_resample_says():
    # 3 tokens: the 27 equally likely index triples give the exact distribution of the resampled mean
    d = np.array([0.0, 1.0, 3.0])
    exact = Counter(round(float(np.mean(d[list(idx)])), 9) for idx in itertools.product(range(3), repeat=3))
    means = resampled_means(d, np.ones(3), 27_000, seed=1)
    drawn = Counter(np.round(means, 9).tolist())
    assert set(drawn) == set(exact)
    for value, count in exact.items():
        assert abs(drawn[value] / len(means) - count / 27) < 0.01, value


def test_the_interval_covers_a_known_offset_about_as_often_as_it_claims():
    rng = np.random.default_rng(0)
    true_change, covered, trials = math.expm1(0.1), 0, 200
    for trial in range(trials):
        a = np.log(rng.uniform(0.05, 0.9, 300))
        b = a - (0.1 + rng.normal(0.0, 0.5, 300))  # per-token differences with mean 0.1 nats
        r = paired_bootstrap(a, b, BootstrapConfig(num_resamples=300, seed=trial))
        covered += r.ci_low <= true_change <= r.ci_high
    assert 0.88 <= covered / trials <= 0.99


def test_the_interval_narrows_as_one_over_root_tokens_and_matches_the_normal_width():
    def width(num_tokens: int) -> float:
        rng = np.random.default_rng(num_tokens)
        a = np.log(rng.uniform(0.05, 0.9, num_tokens))
        r = paired_bootstrap(a, a - rng.normal(0.0, 0.5, num_tokens), BootstrapConfig(num_resamples=1000))
        return math.log1p(r.ci_high) - math.log1p(r.ci_low)  # the interval of the mean difference, in nats

    small, large = width(100), width(10_000)
    assert 7 < small / large < 13  # sqrt(100) = 10
    assert math.isclose(large, 2 * 1.96 * 0.5 / math.sqrt(10_000), rel_tol=0.1)


def test_document_resampling_is_token_resampling_when_every_token_is_its_own_document():
    a, b = _log_probs(200, 1), _log_probs(200, 2)
    cfg = BootstrapConfig(num_resamples=100, seed=3)
    by_token = paired_bootstrap(a, b, cfg)
    by_doc = paired_bootstrap(a, b, BootstrapConfig(num_resamples=100, seed=3, unit="document"), np.arange(200))
    assert (by_doc.ci_low, by_doc.ci_high) == (by_token.ci_low, by_token.ci_high)
    assert by_doc.num_units == 200 and by_doc.unit == "document"


def test_documents_that_differ_as_wholes_give_a_wider_interval_than_tokens():
    rng = np.random.default_rng(0)
    docs = np.repeat(np.arange(20), 50)  # 20 documents of 50 tokens; the difference is per document
    a = np.log(rng.uniform(0.05, 0.9, len(docs)))
    b = a - rng.normal(0.0, 0.5, 20)[docs]
    token = paired_bootstrap(a, b, BootstrapConfig(num_resamples=500))
    doc = paired_bootstrap(a, b, BootstrapConfig(num_resamples=500, unit="document"), torch.from_numpy(docs))
    assert doc.relative_change == token.relative_change and doc.num_units == 20
    assert doc.ci_high - doc.ci_low > 3 * (token.ci_high - token.ci_low)


def test_the_same_seed_gives_the_same_interval_and_the_dict_has_every_field():
    a, b = _log_probs(300, 4), _log_probs(300, 5)
    cfg = BootstrapConfig(num_resamples=50, seed=7)
    first, second = paired_bootstrap(a, b, cfg), paired_bootstrap(a, b, cfg)
    assert first == second
    fields = first.to_dict()
    for name in ("ppl_a", "ppl_b", "relative_change", "ci_low", "ci_high", "confidence", "num_resamples", "seed",
                 "unit", "num_tokens", "excludes_zero"):  # fmt: skip
        assert name in fields


def test_bad_inputs_are_refused():
    a = _log_probs(10)
    with pytest.raises(ValueError, match="same tokens, got 10 and 9"):
        paired_bootstrap(a, a[:9], BootstrapConfig())
    with pytest.raises(ValueError, match="zero tokens"):
        paired_bootstrap(a[:0], a[:0], BootstrapConfig())
    b = a.copy()
    b[3] = -math.inf
    with pytest.raises(ValueError, match="system b gives 1 of 10 tokens a non-finite log-probability"):
        paired_bootstrap(a, b, BootstrapConfig())
    with pytest.raises(ValueError, match="needs groups"):
        paired_bootstrap(a, a, BootstrapConfig(unit="document"))
    with pytest.raises(ValueError, match="one log-probability per token"):
        paired_bootstrap(a[None], a[None], BootstrapConfig())
    for bad in ({"num_resamples": 0}, {"confidence": 1.0}, {"unit": "sentence"}):
        with pytest.raises(ValueError):
            BootstrapConfig(**bad)
