"""The ``Accelerator`` every training and evaluation entry point builds: the config's trackers and its precision.

Precision is the job's ``train.precision`` (``realm.core.precision``): ``auto`` is bf16 autocast on a GPU with bf16
and fp32 elsewhere, CPUs included (bf16 training on a CPU is asked for with ``bf16``); fp32 master weights and
optimizer state either way. ``realm evaluate`` resolves as training does, so that it reproduces the fine-tuning's own
evaluation. An explicit precision in the config decides over the launcher (``accelerate launch
--mixed_precision``, the YAMLs of ``launch/accelerate``), with a warning, so that the run's ``config.yaml`` says what
it ran in; ``auto`` takes a launcher's explicit bf16 or fp16 (how a GPU before Ampere gets fp16).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from accelerate.utils import parse_flag_from_env

from realm.core.precision import mixed_precision_flag, resolve_precision, set_kernels
from realm.core.tracking import TrackingConfig, accelerator_kwargs

logger = logging.getLogger(__name__)


def process_device_type() -> str:
    """"cuda" when this process will run on a GPU (one is visible and the launcher did not put it on CPU), else
    "cpu"."""
    return "cuda" if torch.cuda.is_available() and not parse_flag_from_env("ACCELERATE_USE_CPU") else "cpu"


def enable_tf32() -> bool:
    """TF32 tensor cores for the fp32 matmuls and convolutions of a CUDA process (what remains fp32 under autocast,
    and everything in an fp32 run): the first GPU measurements ran fp32 matmuls at 46 TFLOP/s without it. Returns
    whether it was enabled (False on CPU, where nothing changes)."""
    if process_device_type() != "cuda":
        return False
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    return True


def mixed_precision_for(precision: str) -> str:
    """accelerate's ``mixed_precision`` for a job's ``train.precision`` on this process's device.

    An explicit ``fp32``/``bf16``/``fp16`` decides. ``auto`` takes the launcher's explicit bf16 or fp16 where the
    device can run it (``MIXED_PRECISION=fp16`` for GPUs before Ampere), else resolves by the device. Warns when the
    launcher asked for something else than what runs."""
    device = process_device_type()
    requested = os.environ.get("ACCELERATE_MIXED_PRECISION", "")
    launcher_choice = requested in ("bf16", "fp16") and not (requested == "fp16" and device != "cuda")
    flag = requested if precision == "auto" and launcher_choice else mixed_precision_flag(
        resolve_precision(precision, device, training=True))  # fmt: skip
    if requested not in ("", "no") and requested != flag:  # note: "no" is what a launcher says when nobody chose
        logger.warning("the launcher asks for mixed precision %s; train.precision=%s runs %s", requested, precision,
                       flag)  # fmt: skip
    return flag


def build_accelerator(tracking: TrackingConfig, run_dir: str | Path, precision: str = "auto") -> Accelerator:
    """An ``Accelerator`` logging to ``tracking``'s trackers under ``run_dir``, with ``precision``'s autocast, TF32 on
    GPUs."""
    enable_tf32()
    flag = mixed_precision_for(precision)
    state = AcceleratorState._shared_state
    if state and state.get("_mixed_precision", flag) != flag:
        # note: the pipelines run several jobs in one process and accelerate keeps one state per process; a job
        # whose precision differs from the previous job's re-creates it (the process group, in PartialState, stays)
        AcceleratorState._reset_state(reset_partial_state=False)
    return Accelerator(**accelerator_kwargs(tracking, Path(run_dir)), mixed_precision=flag)


def accelerator_precision(accelerator: Accelerator) -> str:
    """The resolved precision an accelerator computes in: "fp32", "bf16" or "fp16"."""
    return "fp32" if accelerator.mixed_precision == "no" else accelerator.mixed_precision


def use_fast_kernels(model: torch.nn.Module, accelerator: Accelerator, max_length: int = 0) -> str:
    """Sets the kernels of every model in ``model`` for the accelerator's device and precision and sequences of up
    to ``max_length`` wordpieces (``realm.core.precision.set_kernels``: the attention, and the linear layers' fp32
    library), and logs them with the precision; returns them as the log line names them."""
    resolved = accelerator_precision(accelerator)
    kernel = set_kernels(model, accelerator.device.type, resolved, max_length)
    logger.info("precision %s on %s (%s)",
                "fp32" if resolved == "fp32" else f"{resolved} autocast, fp32 weights", accelerator.device.type,
                kernel)  # fmt: skip
    return kernel
