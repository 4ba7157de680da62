"""The QA fine-tuning losses against brute-force enumeration in float64, and their zero-masking."""

import math

import pytest
import torch

from realm.qa.loss import marginal_log_loss, open_qa_loss


def _brute(logits: list[float], correct: list[bool], valid: list[bool]) -> float:
    """-log( sum_{correct valid} e^l / sum_{valid} e^l ), or 0 when nothing valid is correct."""
    right = [l for l, c, v in zip(logits, correct, valid) if c and v]
    if not right:
        return 0.0
    everything = [l for l, v in zip(logits, valid) if v]
    return math.log(sum(math.exp(l) for l in everything)) - math.log(sum(math.exp(l) for l in right))


@pytest.mark.parametrize("seed", range(5))
def test_marginal_log_loss_equals_enumeration(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(6, 9, generator=g, dtype=torch.float64) * 3
    correct = torch.rand(6, 9, generator=g) < 0.3
    valid = torch.rand(6, 9, generator=g) < 0.8
    correct[0] = False  # a question with no correct item at all
    correct[1] = ~valid[1]  # correct items that are all invalid count as nothing correct
    got = marginal_log_loss(logits, correct, valid)
    want = [_brute(l.tolist(), c.tolist(), v.tolist()) for l, c, v in zip(logits, correct, valid)]
    assert got.tolist() == pytest.approx(want, rel=1e-5, abs=1e-5)
    assert got[0] == 0 and got[1] == 0


def test_nothing_correct_gives_zero_loss_and_zero_gradient() -> None:
    logits = torch.randn(3, 7, requires_grad=True)
    correct = torch.zeros(3, 7, dtype=torch.bool)
    correct[2, 4] = True
    loss = marginal_log_loss(logits, correct)
    loss.sum().backward()
    assert loss[:2].abs().max() == 0
    assert torch.isfinite(logits.grad).all()
    assert logits.grad[:2].abs().max() == 0 and logits.grad[2].abs().max() > 0


def test_open_qa_loss_is_mean_of_retriever_plus_reader_enumeration() -> None:
    g = torch.Generator().manual_seed(11)
    bsz, beam, read, length, width = 4, 6, 3, 5, 2
    retriever_logits = torch.randn(bsz, beam, generator=g, dtype=torch.float64)
    has_answer = torch.rand(bsz, beam, generator=g) < 0.4
    block_valid = torch.ones(bsz, beam, dtype=torch.bool)
    block_valid[3, 4:] = False
    span_scores = torch.randn(bsz, read, length, width, generator=g, dtype=torch.float64)
    reader_logits = span_scores + retriever_logits[:, :read, None, None]
    span_valid = torch.rand(bsz, read, length, width, generator=g) < 0.7
    span_correct = torch.rand(bsz, read, length, width, generator=g) < 0.1
    span_correct[1] = False
    has_answer[2] = False
    loss = open_qa_loss(retriever_logits, has_answer, block_valid, reader_logits, span_correct, span_valid)
    retriever = [
        _brute(*(t[b].flatten().tolist() for t in (retriever_logits, has_answer, block_valid))) for b in range(bsz)
    ]
    reader = [_brute(*(t[b].flatten().tolist() for t in (reader_logits, span_correct, span_valid))) for b in range(bsz)]
    assert loss.retriever_loss.item() == pytest.approx(sum(retriever) / bsz, rel=1e-6)
    assert loss.reader_loss.item() == pytest.approx(sum(reader) / bsz, rel=1e-6)
    assert loss.loss.item() == pytest.approx((sum(retriever) + sum(reader)) / bsz, rel=1e-6)
    assert reader[1] == 0 and retriever[2] == 0
