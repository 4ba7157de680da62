"""The REALM loss against brute-force enumeration, and gradients reaching every tower."""

import itertools
import math

import pytest
import torch

from realm.pretrain.loss import (
    answer_metrics,
    closed_book_loss,
    get_loss,
    marginal_mlm_loss,
    marginal_span_loss,
    retrieval_metrics,
)


def _random_inputs(b=3, k=4, m=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, k, generator=g, dtype=torch.float64) * 3
    token_lp = torch.log_softmax(torch.randn(b, k, m, 7, generator=g, dtype=torch.float64), -1)[..., 0]
    mask = (torch.rand(b, m, generator=g) > 0.4).to(torch.float64)
    mask[0] = 0  # an example whose targets are all padding must not count
    mask[1, 0] = 1
    return logits, token_lp, mask


def _brute_force_per_token(logits, token_lp, mask):
    b, k, m = token_lp.shape
    total, count = 0.0, 0.0
    for i in range(b):
        z_norm = sum(math.exp(logits[i, z].item()) for z in range(k))
        for j in range(m):
            if mask[i, j] == 0:
                continue
            p = sum(math.exp(logits[i, z].item()) / z_norm * math.exp(token_lp[i, z, j].item()) for z in range(k))
            total += -math.log(p)
            count += 1
    return total / count


def test_per_token_loss_equals_brute_force_enumeration():
    for seed in range(5):
        logits, token_lp, mask = _random_inputs(seed=seed)
        got = marginal_mlm_loss(logits, token_lp, mask).item()
        assert got == pytest.approx(_brute_force_per_token(logits, token_lp, mask), rel=1e-9)


def test_per_token_loss_ignores_padding_targets():
    logits, token_lp, mask = _random_inputs()
    garbage = torch.where(mask.bool().unsqueeze(1), token_lp, torch.full_like(token_lp, -50.0))
    assert marginal_mlm_loss(logits, garbage, mask).item() == pytest.approx(
        marginal_mlm_loss(logits, token_lp, mask).item()
    )
    # The HF port's implicit all-ones mask would give a different value: the mask really is used.
    assert marginal_mlm_loss(logits, token_lp, torch.ones_like(mask)).item() != pytest.approx(
        marginal_mlm_loss(logits, token_lp, mask).item()
    )


def test_per_span_loss_equals_enumeration_over_documents():
    logits, token_lp, mask = _random_inputs(seed=3)
    b, k, m = token_lp.shape
    losses = []
    for i in range(b):
        if mask[i].sum() == 0:
            continue
        z_norm = sum(math.exp(logits[i, z].item()) for z in range(k))
        p = 0.0
        for z in range(k):
            span = 1.0
            for j in range(m):
                if mask[i, j]:
                    span *= math.exp(token_lp[i, z, j].item())
            p += math.exp(logits[i, z].item()) / z_norm * span
        losses.append(-math.log(p))
    assert marginal_span_loss(logits, token_lp, mask).item() == pytest.approx(sum(losses) / len(losses), rel=1e-9)


def test_null_document_only_when_one_slot_dominates():
    logits, token_lp, mask = _random_inputs()
    logits = logits.clone()
    logits[:, 0] = 1e4  # all mass on the null document: marginal == closed book
    assert marginal_mlm_loss(logits, token_lp, mask).item() == pytest.approx(
        closed_book_loss(logits, token_lp, mask).item()
    )
    metrics = retrieval_metrics(logits, token_lp, mask)
    assert metrics["null_doc_prob"].item() == pytest.approx(1.0)
    assert metrics["retrieval_utility"].item() == pytest.approx(0.0, abs=1e-9)


def test_retrieval_utility_is_marginal_minus_null():
    logits, token_lp, mask = _random_inputs(seed=7)
    util = retrieval_metrics(logits, token_lp, mask)["retrieval_utility"].item()
    b, k, m = token_lp.shape
    vals = []
    for i, j in itertools.product(range(b), range(m)):
        if mask[i, j]:
            p_z = torch.softmax(logits[i], 0)
            marginal = math.log(sum(p_z[z].item() * math.exp(token_lp[i, z, j].item()) for z in range(k)))
            vals.append(marginal - token_lp[i, 0, j].item())
    assert util == pytest.approx(sum(vals) / len(vals), rel=1e-9)


def test_shape_errors_are_clear():
    logits, token_lp, mask = _random_inputs()
    with pytest.raises(ValueError, match="mask must be"):
        marginal_mlm_loss(logits, token_lp, mask[:, :2])
    with pytest.raises(ValueError, match="unknown loss"):
        get_loss("nope")


def test_answer_metrics_count_queries_with_the_answer_and_the_posterior_on_it():
    logits = torch.tensor([[0.0, 1.0, 2.0], [0.0, 0.0, -1e4], [3.0, 0.0, 0.0]])
    slots = torch.tensor([[False, True, True], [False, True, False], [False, False, False]])
    got = answer_metrics(logits, slots)
    p = [[math.exp(v) / sum(math.exp(w) for w in row) for v in row] for row in logits.tolist()]
    posterior = (p[0][1] + p[0][2] + p[1][1] + 0.0) / 3
    assert got["answer_recall"].item() == pytest.approx(2 / 3)
    assert got["answer_posterior"].item() == pytest.approx(posterior, rel=1e-6)
