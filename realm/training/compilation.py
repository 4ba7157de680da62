"""``train.compile``: a training job's transformers backbones compiled by ``torch.compile`` (inductor), opt-in.

Only the backbones (each ``BertModel`` inside a ``RealmModel``, a reader, an embedder) are compiled, as
``benchmarks/step.py --compile`` measured them: the REALM step around them (top-k, gathers, the index search, the
marginal loss over a variable number of masked tokens) would break the graph or recompile, while a backbone is one
graph whose many small ops (LayerNorm, GELU, softmax, casts) inductor fuses. ``Module.compile`` compiles in place,
so parameter names, ``state_dict`` keys, checkpoints and saved weights stay those of the eager model (no
``_orig_mod.`` prefix, unlike ``torch.compile(module)``). Dynamic shapes (``dynamic=True``), since batch and sequence
lengths vary from batch to batch; train and eval modes, grad and no-grad each compile once (a job's own evaluation
runs the compiled model). The index builder, a child process, is not compiled: it is no training job.
"""

from __future__ import annotations

import functools
import logging

import torch
from torch import nn

from realm.core.errors import ConfigError

logger = logging.getLogger(__name__)


@functools.cache
def check_compiler(device_type: str) -> None:
    """Raises ``ConfigError`` (one line, naming the cause) unless inductor compiles and runs a kernel on
    ``device_type`` here: a C++ compiler on CPU, Triton on a GPU. Checked once per process, on a trial function, so
    that a machine without them fails at set-up and not at the first step, in a page of inductor traceback."""
    import torch._inductor.config as inductor_config  # note: lazily, it imports the whole compiler stack

    try:
        # note: the graph cache off, so that kernels compiled on an earlier run cannot hide a missing compiler
        with inductor_config.patch({"fx_graph_cache": False}):
            torch.compile(lambda x: x * 2 + 1, dynamic=False)(torch.ones(4, device=device_type))
    except Exception as err:  # noqa: BLE001 - whatever stops inductor is the cause to name
        cause = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
        raise ConfigError(f"train.compile=true, but torch.compile (inductor) cannot compile on this {device_type} "
                          f"machine: {cause[:300]}; set train.compile=false") from err  # fmt: skip


def compile_backbones(model: nn.Module, device_type: str) -> int:
    """Compiles, in place and with dynamic shapes, every transformers backbone in ``model`` (a ``PreTrainedModel``
    that is its own ``base_model``: ``BertModel``; a tower shared by two embedders is compiled once); returns how
    many. Raises ``ConfigError`` where inductor cannot compile (``check_compiler``). Compilation itself happens at
    the first forward of each mode (train, eval, no-grad): those steps take the compile time."""
    from transformers import PreTrainedModel  # note: lazily, as realm.core.precision does

    check_compiler(device_type)
    backbones = [m for m in model.modules() if isinstance(m, PreTrainedModel) and m.base_model is m]
    for backbone in backbones:
        backbone.compile(dynamic=True)
    logger.info("train.compile: %d transformers backbone(s) compiled by inductor (dynamic shapes); the first steps "
                "of each mode wait for the compile", len(backbones))  # fmt: skip
    return len(backbones)
