"""The sweep shares p_kNN across lambdas without changing a figure; choose picks the validation grid's best and
report scores test once at that setting, with the same interval as the bootstrap itself."""

from __future__ import annotations

import math

import torch

from realm.knnlm import knn
from realm.knnlm import perplexity as ev
from realm.knnlm.bootstrap import BootstrapConfig, paired_bootstrap


def _neighbours(seed: int, tokens: int = 300, k: int = 16, vocab: int = 12) -> ev.Neighbours:
    g = torch.Generator().manual_seed(seed)
    targets = torch.randint(0, vocab, (tokens,), generator=g)
    values = torch.randint(0, vocab, (tokens, k), generator=g).to(torch.int32)
    values[: tokens // 2, 0] = targets[: tokens // 2].to(torch.int32)  # half the tokens have their target nearest
    scores = -torch.rand(tokens, k, generator=g).cumsum(1) * 3  # best first
    return ev.Neighbours(targets=targets, lm_log_probs=torch.log(torch.full((tokens,), 1 / vocab)), scores=scores,
                         values=values, ids=torch.zeros(tokens, k, dtype=torch.long),
                         docs=torch.arange(tokens) // 30, positions=torch.arange(tokens), lm_seconds=1.0,
                         search_seconds=1.0)  # fmt: skip


def test_the_sweep_equals_scoring_each_setting_on_its_own():
    nb = _neighbours(0)
    grid = ev.sweep(nb, [4, 16], [0.5, 2.0], [0.1, 0.6])
    assert len(grid) == 8
    for row in grid:
        alone = ev.score(nb, row["k"], row["tau"], row["lambda"])
        assert math.isclose(row["ppl_knnlm"], alone["ppl_knnlm"], rel_tol=1e-12)
        mixed = knn.interpolate(nb.lm_log_probs, ev.knn_token_log_probs(nb, row["k"], row["tau"]), row["lambda"])
        assert math.isclose(row["ppl_knnlm"], knn.perplexity(-mixed.double().sum().item(), 300), rel_tol=1e-9)


def test_choose_on_validation_then_report_on_test_with_its_interval():
    valid, test = _neighbours(1), _neighbours(2)
    chosen, grid = ev.choose(valid, [4, 16], [0.5, 2.0], [0.1, 0.6])
    assert chosen == min(grid, key=lambda r: r["ppl_knnlm"]) and chosen["tokens"] == valid.num_tokens
    cfg = BootstrapConfig(num_resamples=200, seed=3)
    score, difference = ev.report(test, chosen, cfg)
    assert score == ev.score(test, chosen["k"], chosen["tau"], chosen["lambda"])
    _, mixed = ev.token_log_probs(test, chosen["k"], chosen["tau"], chosen["lambda"])
    assert difference == paired_bootstrap(test.lm_log_probs, mixed, cfg)
    by_document = ev.report(test, chosen, BootstrapConfig(num_resamples=200, seed=3, unit="document"))[1]
    assert by_document.num_units == 10  # test's documents, resampled whole
