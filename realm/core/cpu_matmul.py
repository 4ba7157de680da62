"""fp32 linear layers through oneDNN on CPU, opt in with ``REALM_CPU_MATMUL=onednn``.

torch's CPU wheels compute an fp32 ``nn.Linear`` with MKL's sgemm. On AMD processors MKL takes its AVX2 code path even
where the cores have AVX-512, so half of the fp32 vector width sits idle: on a 2-core Zen 5 EPYC (torch 2.13.0+cpu)
MKL's sgemm ran at 197-203 GFLOP/s against 375-435 for the same products through oneDNN, which torch also ships (it
already computes every bf16 matmul there); a MiniLM-shape fp32 REALM step went from 3.8 to 2.9 s and the demo's
from 228-247 to 175-207 ms (``docs/performance.md``, "fp32 through oneDNN"). ``OneDnnLinear`` runs the
forward product and the input gradient with oneDNN's fp32 kernel, and leaves the weight gradient to ``torch.mm``:
that product reduces over the batch's rows, which oneDNN's linear would need transposed copies of the activations and
gradients for, and those copies cost more than oneDNN saves at narrow layers (the demo's QA step ran 0.86-0.92x with
them, 1.05-1.14x without).

Opt in, not the default: the results are fp32 to the same tolerance but not the same digits (the kernels reduce in
another order, as another thread count does), and the demo's recorded runs and ranges were measured with torch's
default. An environment variable rather than a config key because it is a property of the machine, and it reaches
every process a job starts (the index builder) and every stage a pipeline runs; each job logs what it chose.
"""

from __future__ import annotations

import functools
import os

import torch
from torch import Tensor, nn

from realm.core.errors import ConfigError

ENV = "REALM_CPU_MATMUL"
CHOICES = ("blas", "onednn")
"""``blas``: torch's default (MKL on x86 wheels); ``onednn``: ``OneDnnLinear`` for fp32 work on CPU."""


def cpu_matmul() -> str:
    """The choice ``REALM_CPU_MATMUL`` makes (``blas`` when unset); a bad value or oneDNN missing from this torch
    build is a ``ConfigError`` naming the variable."""
    choice = os.environ.get(ENV, "").strip() or "blas"
    if choice not in CHOICES:
        raise ConfigError(f"{ENV} must be one of {list(CHOICES)}, got {choice!r}")
    if choice == "onednn" and not onednn_available():
        raise ConfigError(f"{ENV}=onednn, but this torch build has no oneDNN linear kernel; unset it")
    return choice


def onednn_linears(device_type: str, resolved: str) -> bool:
    """Whether work on ``device_type`` in ``resolved`` precision computes its linear products with oneDNN's fp32 kernel:
    fp32 on CPU, with ``REALM_CPU_MATMUL=onednn``."""
    return device_type == "cpu" and resolved == "fp32" and cpu_matmul() == "onednn"


@functools.cache
def onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def onednn_linear(rows: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``rows @ weight.T (+ bias)`` for 2-D fp32 tensors (``weight`` [out, in], as a linear layer's), by oneDNN."""
    return torch.ops.mkldnn._linear_pointwise(rows.contiguous(), weight.contiguous(), bias, "none", [], "")


class OneDnnLinearFunction(torch.autograd.Function):
    """``x @ w.T + b`` and its gradients: the output and the input gradient by oneDNN, the weight gradient by
    ``torch.mm``."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return onednn_linear(x.reshape(-1, x.shape[-1]), weight, bias).reshape(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        x, weight = ctx.saved_tensors
        grad_rows = grad.reshape(-1, grad.shape[-1])
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = onednn_linear(grad_rows, weight.t()).reshape(x.shape)  # [M, out] @ [out, in]
        if ctx.needs_input_grad[1]:
            grad_w = grad_rows.t().mm(x.reshape(-1, x.shape[-1]))  # [out, M] @ [M, in]
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = grad_rows.sum(0)
        return grad_x, grad_w, grad_b


class OneDnnLinear(nn.Linear):
    """An ``nn.Linear`` whose fp32 CPU work (outside autocast) goes through ``OneDnnLinearFunction``; anything else
    (another dtype, autocast, a GPU) is ``nn.Linear``'s own. Same parameters and state dict."""

    def forward(self, x: Tensor) -> Tensor:
        plain_fp32 = x.dtype == torch.float32 and self.weight.dtype == torch.float32 and x.device.type == "cpu"
        if plain_fp32 and not torch.is_autocast_enabled("cpu"):
            return OneDnnLinearFunction.apply(x, self.weight, self.bias)
        return super().forward(x)


def set_linear_kernel(model: nn.Module, device_type: str, resolved: str) -> str:
    """With ``REALM_CPU_MATMUL=onednn``, fp32 work on CPU: every ``nn.Linear`` in ``model`` becomes a
    ``OneDnnLinear`` (in place, parameters untouched). Returns the kernel its linears use: "onednn" or "blas"."""
    if not onednn_linears(device_type, resolved):
        return "blas"
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = OneDnnLinear
    return "onednn"
