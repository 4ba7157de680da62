"""The learned datastore W_ds (Xu et al. 2023): row allocation, and its top-k rows as neighbours giving the same
p_ds as its own masked softmax, so the kNN-LM's sweeps and tuning apply to it unchanged."""

from __future__ import annotations

import math

import pytest
import torch

from realm.knnlm.learned import LearnedConfig, LearnedDatastore, allocate_rows, learned_log_probs, train_learned


def test_uniform_allocation_gives_every_token_r_rows_in_order():
    rows = allocate_rows(torch.tensor([5, 0, 1]), 2)
    assert rows.tolist() == [0, 0, 1, 1, 2, 2]


def test_frequency_allocation_keeps_the_budget_one_row_each_and_the_rest_by_count():
    counts = torch.tensor([600, 300, 100, 0, 0])
    rows = allocate_rows(counts, 3, "frequency")
    per_token = torch.bincount(rows, minlength=5)
    assert len(rows) == 15 and (per_token >= 1).all()  # R x V rows, none of the vocabulary left without one
    assert per_token.tolist() == [1 + 6, 1 + 3, 1 + 1, 1, 1]  # the 10 extra rows split 6:3:1 like the counts
    assert torch.equal(rows, allocate_rows(counts, 3, "frequency"))  # deterministic
    assert torch.equal(rows, rows.sort().values)  # a token's rows are contiguous
    with pytest.raises(ValueError, match="allocation must be one of uniform, frequency"):
        LearnedConfig(allocation="random")


@pytest.mark.parametrize("allocation", ["uniform", "frequency"])
def test_its_top_k_rows_as_neighbours_give_its_own_masked_softmax(allocation):
    generator = torch.Generator().manual_seed(0)
    vocab, dim = 7, 4
    counts = torch.tensor([9, 1, 3, 0, 2, 5, 1])
    module = LearnedDatastore(allocate_rows(counts, 3, allocation), vocab, dim)
    with torch.no_grad():
        module.weight.copy_(torch.randn(module.weight.shape, generator=generator))
    keys, targets = torch.randn(12, dim, generator=generator), torch.randint(0, vocab, (12,), generator=generator)
    for k, tau in ((5, 1.0), (21, 0.7)):
        got = learned_log_probs(module, keys, targets, k, tau)
        # brute force, one query at a time: softmax over the k best rows, the target's rows summed
        for q in range(len(keys)):
            scores = -((module.weight.detach() - keys[q]) ** 2).sum(1).double() / tau
            top = scores.topk(k).indices.tolist()
            norm = sum(math.exp(scores[r]) for r in top)
            mass = sum(math.exp(scores[r]) for r in top if module.row_tokens[r] == targets[q]) / norm
            expected = math.log(mass) if mass > 0 else -math.inf
            assert math.isclose(float(got[q]), expected, rel_tol=1e-4, abs_tol=1e-5)
            with torch.no_grad():  # the training form: the same, floored for finite gradients
                trained_form = float(module.target_log_probs(keys[q : q + 1], targets[q : q + 1], k, tau))
            if mass > 0:
                assert math.isclose(trained_form, expected, rel_tol=1e-4, abs_tol=1e-5)
            else:
                assert trained_form < -9e3


def test_more_rows_by_frequency_train_and_keep_the_budget():
    generator = torch.Generator().manual_seed(1)
    vocab, dim = 20, 8
    centres = torch.randn(vocab, dim, generator=generator) * 3
    values = torch.randint(0, 5, (2000,), generator=generator)  # five tokens only: the rest of the rows go to them
    keys = centres[values] + torch.randn(2000, dim, generator=generator)
    lm_log = torch.full((2000,), math.log(1 / vocab))
    cfg = LearnedConfig(rows_per_token=4, allocation="frequency", k=16, steps=40, batch_size=256)
    module, history = train_learned(keys, values, lm_log, vocab, cfg)
    assert module.num_parameters == 4 * vocab * dim
    assert (torch.bincount(module.row_tokens, minlength=vocab)[:5] > 4).all()
    assert history[-1] < history[0]
