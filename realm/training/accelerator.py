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


def build_accelerator(tracking: TrackingConfig, run_dir: str | Path) -> Accelerator:
    """An ``Accelerator`` logging to ``tracking``'s trackers under ``run_dir``, fp32 when on CPU."""
    precision = cpu_safe_mixed_precision()
    if precision == "no":
        logger.warning("mixed precision %s requested on CPU: running in fp32", os.environ["ACCELERATE_MIXED_PRECISION"])
    return Accelerator(**accelerator_kwargs(tracking, Path(run_dir)), mixed_precision=precision)
