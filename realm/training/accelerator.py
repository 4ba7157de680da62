"""The ``Accelerator`` every training and evaluation entry point builds: the config's trackers, and fp32 on CPU.

Precision comes from the launcher (``accelerate launch --mixed_precision`` or the YAML of ``launch/accelerate``):
bf16/fp16 autocast on GPUs. Processes on CPU stay fp32 whatever the launcher asks: CPU autocast is lossy and often
slower (``bench/step.py --bf16``), and CPU runs here are tests and small runs compared against fp32 references.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import parse_flag_from_env

from realm.core.tracking import TrackingConfig, accelerator_kwargs

logger = logging.getLogger(__name__)


def cpu_safe_mixed_precision() -> str | None:
    """``"no"`` when the launcher asks for bf16/fp16 but this process runs on CPU, else None (the launcher's choice
    stands)."""
    requested = os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
    on_gpu = torch.cuda.is_available() and not parse_flag_from_env("ACCELERATE_USE_CPU")
    return "no" if requested != "no" and not on_gpu else None


def enable_tf32() -> bool:
    """TF32 tensor cores for the fp32 matmuls and convolutions of a CUDA process (what remains fp32 under autocast,
    and everything in an fp32 run): the first GPU measurements ran fp32 matmuls at 46 TFLOP/s without it. Returns
    whether it was enabled (False on CPU, where nothing changes)."""
    if not torch.cuda.is_available() or parse_flag_from_env("ACCELERATE_USE_CPU"):
        return False
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    return True


def build_accelerator(tracking: TrackingConfig, run_dir: str | Path) -> Accelerator:
    """An ``Accelerator`` logging to ``tracking``'s trackers under ``run_dir``, fp32 when on CPU, TF32 on GPUs."""
    enable_tf32()
    precision = cpu_safe_mixed_precision()
    if precision == "no":
        logger.warning("mixed precision %s requested on CPU: running in fp32", os.environ["ACCELERATE_MIXED_PRECISION"])
    return Accelerator(**accelerator_kwargs(tracking, Path(run_dir)), mixed_precision=precision)
