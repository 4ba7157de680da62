"""kNN-LM's distributions against brute-force enumeration in float64: ties, duplicate values, unfilled slots, k
larger than the datastore; the interpolation against its formula; mask-to-k."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from realm.knnlm import knn


def _brute_force(scores, values, vocab, tau):
    """p_kNN(w) = sum_{i: v_i = w} exp(s_i / tau) / sum_i exp(s_i / tau), one neighbour at a time, in float64."""
    out = np.zeros((len(scores), vocab))
    for q in range(len(scores)):
        weights = [math.exp(s / tau) if s != -math.inf else 0.0 for s in scores[q]]
        total = sum(weights)
        for w, v in zip(weights, values[q]):
            out[q, v] += w / total
    return out


CASES = [
    # (scores, values, tau): distinct; ties and duplicate values; an unfilled slot (-inf, what an IVF index leaves);
    # L2 scores (negative distances) of very different magnitudes
    ([[-1.0, -2.0, -3.0]], [[4, 1, 2]], 1.0),
    ([[-0.5, -0.5, -0.5, -2.0]], [[3, 3, 1, 3]], 1.0),
    ([[5.0, 5.0, -math.inf]], [[0, 2, 0]], 2.0),
    ([[-10.0, -300.0, -301.0, -1000.0]], [[1, 2, 2, 0]], 7.5),
]


@pytest.mark.parametrize("scores,values,tau", CASES)
def test_knn_distribution_matches_brute_force(scores, values, tau):
    expected = _brute_force(scores, values, 6, tau)
    got = knn.knn_log_probs(torch.tensor(scores, dtype=torch.float64), torch.tensor(values), 6, tau).double().exp()
    np.testing.assert_allclose(got.numpy(), expected, atol=1e-6)
    for target in range(6):
        one = knn.knn_target_log_probs(torch.tensor(scores), torch.tensor(values), torch.tensor([target]), tau)
        assert math.isclose(math.exp(one.item()), expected[0, target], abs_tol=1e-6)
        if expected[0, target] == 0:
            assert one.item() == -math.inf  # no neighbour with that token: exactly zero, not a tiny number


def test_large_distances_do_not_underflow_the_neighbours_mass():
    # exp(-1000) underflows in float64; in log space the nearest neighbour still takes (almost) all the mass
    scores = torch.tensor([[-1000.0, -1010.0]])
    log_p = knn.knn_target_log_probs(scores, torch.tensor([[3, 4]]), torch.tensor([3]), tau=1.0)
    assert math.isclose(log_p.item(), -math.log1p(math.exp(-10.0)), rel_tol=1e-9, abs_tol=1e-7)


def test_k_larger_than_the_datastore_uses_every_entry():
    from realm.index.mips import BruteForceIndex

    keys = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
    scores, ids = BruteForceIndex(keys, metric="l2").search(keys[:2], k=1024)
    assert scores.shape == (2, 5)  # clamped to the 5 entries
    values = torch.tensor([0, 1, 1, 2, 0])[ids]
    total = knn.knn_log_probs(scores, values, 3, tau=1.0).exp().sum(1)
    torch.testing.assert_close(total, torch.ones(2), atol=1e-6, rtol=0)
    expected_l2 = -((keys[:2, None, :] - keys[None, :, :]) ** 2).sum(-1).sort(1).values  # nearest first
    torch.testing.assert_close(scores, expected_l2, atol=1e-5, rtol=0)


@pytest.mark.parametrize("lam", [0.0, 0.25, 0.65, 1.0])
def test_interpolation_equals_the_formula(lam):
    p_lm = torch.tensor([0.5, 0.01, 0.3, 1e-9])
    p_knn = torch.tensor([0.1, 0.0, 0.9, 0.5])
    got = knn.interpolate(p_lm.log(), p_knn.log(), lam).exp()
    torch.testing.assert_close(got, (1 - lam) * p_lm + lam * p_knn, atol=1e-7, rtol=1e-6)
    if lam == 0.0:
        assert torch.equal(knn.interpolate(p_lm.log(), p_knn.log(), lam), p_lm.log())  # exactly the LM


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="lambda"):
        knn.interpolate(torch.zeros(1), torch.zeros(1), 1.5)
    with pytest.raises(ValueError, match="tau"):
        knn.knn_target_log_probs(torch.zeros(1, 2), torch.zeros(1, 2, dtype=torch.long), torch.zeros(1), tau=0.0)
    with pytest.raises(ValueError, match="Q, K"):
        knn.knn_target_log_probs(torch.zeros(1, 2), torch.zeros(1, 3, dtype=torch.long), torch.zeros(1))


def test_mask_to_k_keeps_the_k_largest():
    logits = torch.tensor([[0.1, 3.0, -1.0, 2.0]])
    masked = knn.mask_to_k(logits, 2)
    assert masked[0, 1] == 3.0 and masked[0, 3] == 2.0
    assert torch.isinf(masked[0, 0]) and torch.isinf(masked[0, 2])
    assert torch.equal(knn.mask_to_k(logits, 10), logits)


def test_a_query_with_no_neighbour_at_all_has_probability_zero_not_nan():
    # an approximate index can leave every slot of a query unfilled (score -inf)
    scores = torch.tensor([[-math.inf, -math.inf], [-1.0, -2.0]])
    values = torch.tensor([[0, 0], [1, 0]])
    target = knn.knn_target_log_probs(scores, values, torch.tensor([0, 1]))
    assert target[0].item() == -math.inf and not torch.isnan(target).any()
    full = knn.knn_log_probs(scores, values, 3)
    assert torch.isneginf(full[0]).all() and not torch.isnan(full).any()
    mixed = knn.interpolate(torch.tensor([-1.0, -1.0]), target, 0.25)
    assert math.isclose(mixed[0].item(), -1.0 + math.log(0.75), rel_tol=1e-6)


def test_the_oracle_lambda_is_the_best_mixture_for_every_token():
    lm, knn_log = torch.log(torch.tensor([0.2, 0.5, 0.01])), torch.log(torch.tensor([0.6, 0.1, 0.0]))
    oracle = knn.oracle_log_probs(lm, knn_log)
    for lam in np.linspace(0, 1, 11):
        assert (oracle >= knn.interpolate(lm, knn_log, float(lam)) - 1e-6).all()
    torch.testing.assert_close(oracle, torch.log(torch.tensor([0.6, 0.5, 0.01])))


def test_recall_at_k_against_set_intersection():
    generator = torch.Generator().manual_seed(0)
    exact = torch.stack([torch.randperm(40, generator=generator)[:12] for _ in range(6)])
    approx = torch.stack([torch.randperm(40, generator=generator)[:12] for _ in range(6)])
    approx[0, 3] = -1  # an unfilled slot finds nothing
    for k in (1, 5, 12):
        expected = np.mean([len(set(e[:k].tolist()) & set(a[:k].tolist()) - {-1}) / k for e, a in zip(exact, approx)])
        assert math.isclose(knn.recall_at_k(approx, exact, k), expected, abs_tol=1e-12)
    assert knn.recall_at_k(exact, exact, 12) == 1.0
    with pytest.raises(ValueError, match="recall@13 needs at least 13 ids"):
        knn.recall_at_k(approx, exact, 13)
