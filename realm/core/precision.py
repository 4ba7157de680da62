"""One precision setting for every job (``train.precision``, the builder's ``precision``): what it means on the
device a process runs on, and what follows from it.

``fp32`` computes in float32. ``bf16`` trains with fp32 master weights and optimizer state under bf16 autocast (losses
upcast to fp32, ``realm.pretrain.loss``), and runs no-grad work (the builder's embedding) on bf16 weights. ``auto`` is
bf16 where the device computes it natively and bf16 has been shown not to cost learning: training on a CUDA GPU with
bf16 (Ampere and later), and no-grad work (the builder's embedding) on a CPU whose cores have a bf16 dot-product
instruction (``amx_bf16`` or ``avx512_bf16`` in ``/proc/cpuinfo``). Training on such a CPU stays fp32 under ``auto``:
the learning-parity runs fixed before they ran (experiments/demo/log/2026-11-28-precision.md) did not show bf16 inside
fp32's range, so bf16 training there is asked for explicitly (``bf16``: a 1.6-1.9x faster REALM step). fp32 elsewhere,
where bf16 would be emulated and slower. ``fp16`` is for GPUs without bf16 (autocast with loss scaling).

A run records the precision it was asked for in its ``config.yaml``, and logs what it resolved to.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import torch
from torch import nn

from realm.core.errors import ConfigError

logger = logging.getLogger(__name__)

PRECISIONS = ("fp32", "bf16", "fp16", "auto")
"""What a config may ask for."""
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
"""The dtype of each resolved precision (weights and activations of no-grad work, autocast's in training)."""
NATIVE_BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")
"""CPU flags under which oneDNN runs bf16 matmuls on bf16 hardware (AMX tiles, or AVX-512 BF16 dot products)."""
CPUINFO = Path("/proc/cpuinfo")


def check_precision(precision: str, name: str = "precision", allow_empty: bool = False) -> None:
    """Raises ``ValueError`` unless ``precision`` is one of ``PRECISIONS`` (or empty, where that is allowed)."""
    if precision in PRECISIONS or (allow_empty and not precision):
        return
    choices = f"{'empty or ' if allow_empty else ''}one of {list(PRECISIONS)}"
    raise ValueError(f"{name} must be {choices}, got {precision!r}")


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The flags of the first processor in ``/proc/cpuinfo`` (empty where there is none: not Linux)."""
    try:
        text = CPUINFO.read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def native_bf16(device_type: str) -> bool:
    """Whether ``device_type`` ("cpu" or "cuda") computes bf16 matmuls in hardware."""
    if device_type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)
    return bool(cpu_flags() & set(NATIVE_BF16_CPU_FLAGS))


def resolve_precision(precision: str, device_type: str, *, training: bool = False) -> str:
    """``fp32``, ``bf16`` or ``fp16``: ``auto`` made concrete for ``device_type`` and for training or no-grad work
    (the module docstring says how). fp16 on a CPU is refused (``ConfigError``, one line for the user): CPU autocast
    has no loss scaling and no fast fp16 kernels."""
    check_precision(precision)
    if precision == "auto":
        # note: not shown to learn as fp32 does (experiments/demo/log/2026-11-28-precision.md)
        cpu_training = training and device_type != "cuda"
        return "bf16" if native_bf16(device_type) and not cpu_training else "fp32"
    if precision == "fp16" and device_type != "cuda":
        raise ConfigError("precision fp16 needs a CUDA GPU and this process runs on CPU; use bf16 or fp32")
    if precision == "bf16" and device_type == "cpu" and not native_bf16("cpu"):
        warn_emulated_bf16()
    return precision


@functools.cache
def warn_emulated_bf16() -> None:
    """Once a process: bf16 asked for on a CPU that has no bf16 instruction. It still runs (the numerics can be
    worth checking there), but every matmul is emulated: on an AVX2-only AMD EPYC (torch 2.13.0+cpu) a bf16
    ``torch.mm`` ran 25x (256^3) to 66x (512^3) slower than fp32, so a bf16 job there is slower, not faster."""
    logger.warning(
        "precision bf16 on a CPU without a bf16 instruction (neither %s in /proc/cpuinfo): its matmuls are emulated "
        "and run tens of times slower than fp32; use fp32 or auto here",
        " nor ".join(NATIVE_BF16_CPU_FLAGS),
    )


def mixed_precision_flag(resolved: str) -> str:
    """accelerate's ``mixed_precision`` for a resolved precision ("no", "bf16", "fp16")."""
    return "no" if resolved == "fp32" else resolved


EAGER_MAX_LENGTH = 160
"""Up to this many wordpieces a sequence, the matmul ("eager") attention beats ``sdpa`` under bf16 on CPU."""


def attention_implementation(device_type: str, resolved: str, max_length: int = 0) -> str:
    """The transformers attention kernel that is fastest for this device, precision and longest sequence.

    Measured on the 2-core AVX-512 BF16 machines (torch 2.13, MiniLM shape, the REALM step of ``benchmarks/step.py``,
    reader sequences of query + block): under bf16 on CPU the matmul ("eager") attention is 1.26x faster than
    ``sdpa`` at 136 wordpieces (``sdpa``'s CPU flash-attention backward does not reach the bf16 units there), level at
    174, and 1.24x slower at 206 and 1.54x at 300, where eager's [L, L] score matrices dominate; so eager up to
    ``EAGER_MAX_LENGTH`` (0: length unknown, ``sdpa``). In fp32 ``sdpa`` is faster at every length; GPUs keep it."""
    short = 0 < max_length <= EAGER_MAX_LENGTH
    return "eager" if device_type == "cpu" and resolved != "fp32" and short else "sdpa"


def set_attention(model: nn.Module, device_type: str, resolved: str, max_length: int = 0) -> str:
    """Sets ``attention_implementation`` on every transformers model inside ``model`` (every tower of a
    ``RealmModel``, a reader, a causal LM) for sequences of up to ``max_length`` wordpieces; returns it. Weights and
    results are unchanged (the kernels compute the same attention), only the speed."""
    from transformers import PreTrainedModel  # note: lazily, so that importing realm.core stays light

    implementation = attention_implementation(device_type, resolved, max_length)
    for module in model.modules():
        if isinstance(module, PreTrainedModel) and module.config._attn_implementation != implementation:
            module.set_attn_implementation(implementation)
    return implementation


def set_kernels(model: nn.Module, device_type: str, resolved: str, max_length: int = 0) -> str:
    """The CPU kernels of every model a job runs: ``set_attention``, and ``realm.core.cpu_matmul``'s linear layers
    (oneDNN for fp32 on CPU where ``REALM_CPU_MATMUL=onednn`` asks for it). Returns both, for the job's log line."""
    from realm.core.cpu_matmul import set_linear_kernel  # note: lazily, as set_attention's transformers import

    attention = set_attention(model, device_type, resolved, max_length)
    return f"{attention} attention, {set_linear_kernel(model, device_type, resolved)} linears"
