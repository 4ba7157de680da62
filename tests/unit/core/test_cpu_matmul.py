"""realm.core.cpu_matmul: fp32 linear layers through oneDNN when ``REALM_CPU_MATMUL=onednn`` asks for it; the same
outputs and gradients as ``nn.Linear`` to fp32 tolerance, the forward and input-gradient products by oneDNN, and nothing
changed otherwise."""

import pytest
import torch
from torch import nn
from transformers import BertConfig

from realm.core import cpu_matmul
from realm.core.errors import ConfigError
from realm.core.precision import set_kernels
from realm.core.tracking import TrackingConfig
from realm.models.retriever import RetrieverConfig
from realm.pretrain.model import RealmModel
from realm.training.accelerator import build_accelerator, use_fast_kernels

pytestmark = pytest.mark.skipif(not cpu_matmul.onednn_available(), reason="this torch build has no oneDNN")

TINY = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # fmt: skip


def tiny_model() -> RealmModel:
    torch.manual_seed(0)
    return RealmModel.from_config(TINY, RetrieverConfig(embed_dim=8, share_embedders=False))


@pytest.mark.parametrize("bias", [True, False])
def test_outputs_and_every_gradient_match_nn_linear_and_the_forward_and_input_gradient_are_onednns(monkeypatch, bias):
    calls = []
    real = cpu_matmul.onednn_linear
    monkeypatch.setattr(cpu_matmul, "onednn_linear", lambda *a: calls.append(a[0].shape) or real(*a))
    torch.manual_seed(0)
    plain = nn.Linear(48, 40, bias=bias)
    fast = nn.Linear(48, 40, bias=bias)
    fast.load_state_dict(plain.state_dict())
    fast.__class__ = cpu_matmul.OneDnnLinear
    x = torch.randn(6, 48, 5).transpose(1, 2)  # [6, 5, 48], not contiguous: as a transposed activation arrives
    xs = [x.clone().requires_grad_(True) for _ in range(2)]
    outs = [layer(xi) for layer, xi in zip((plain, fast), xs)]
    upstream = torch.randn_like(outs[0])
    for out in outs:
        out.backward(upstream)
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(xs[1].grad, xs[0].grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fast.weight.grad, plain.weight.grad, rtol=1e-5, atol=1e-4)
    if bias:
        torch.testing.assert_close(fast.bias.grad, plain.bias.grad, rtol=1e-5, atol=1e-5)
    assert calls == [(30, 48), (30, 40)]  # the forward and the input gradient; the weight gradient is torch.mm's


def test_the_variable_swaps_every_linear_of_an_fp32_cpu_model_and_nothing_else(monkeypatch):
    model = tiny_model().eval()
    ids, mask = torch.randint(5, 64, (3, 7)), torch.ones(3, 7, dtype=torch.long)
    before = model.retriever.embed_queries(ids, mask)
    keys = list(model.state_dict())
    linears = sum(type(m) is nn.Linear for m in model.modules())
    monkeypatch.delenv(cpu_matmul.ENV, raising=False)
    assert set_kernels(model, "cpu", "fp32") == "sdpa attention, blas linears"
    monkeypatch.setenv(cpu_matmul.ENV, "onednn")
    assert set_kernels(model, "cpu", "bf16", 64) == "eager attention, blas linears"  # bf16 is oneDNN's already
    assert set_kernels(model, "cuda", "fp32") == "sdpa attention, blas linears"
    assert not any(isinstance(m, cpu_matmul.OneDnnLinear) for m in model.modules())
    assert set_kernels(model, "cpu", "fp32") == "sdpa attention, onednn linears"
    assert linears > 10 and sum(type(m) is cpu_matmul.OneDnnLinear for m in model.modules()) == linears
    assert list(model.state_dict()) == keys
    torch.testing.assert_close(model.retriever.embed_queries(ids, mask), before, rtol=1e-5, atol=1e-5)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast work stays nn.Linear's (oneDNN's bf16 path)
        assert model.retriever.embed_queries(ids, mask).dtype == torch.bfloat16


def test_a_job_logs_the_choice_and_trains_as_with_blas(monkeypatch, tmp_path):
    monkeypatch.setenv(cpu_matmul.ENV, "onednn")
    accelerator = build_accelerator(TrackingConfig(), tmp_path, "fp32")
    losses = {}
    for name in ("blas", "onednn"):
        model = tiny_model().retriever.query_embedder
        if name == "onednn":
            assert use_fast_kernels(model, accelerator, 7) == "sdpa attention, onednn linears"
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        torch.manual_seed(1)
        ids, mask, target = torch.randint(5, 64, (8, 7)), torch.ones(8, 7, dtype=torch.long), torch.randn(8, 8)
        losses[name] = []
        for _ in range(30):
            loss = (model(ids, mask) - target).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses[name].append(loss.item())
    assert losses["onednn"][-1] < 0.2 * losses["onednn"][0]  # it learns
    torch.testing.assert_close(losses["onednn"], losses["blas"], rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("value", ["mkl", "oneDNN"])
def test_a_bad_value_is_one_line_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv(cpu_matmul.ENV, value)
    with pytest.raises(ConfigError, match=rf"REALM_CPU_MATMUL must be one of \['blas', 'onednn'\], got '{value}'"):
        set_kernels(tiny_model(), "cpu", "fp32")
