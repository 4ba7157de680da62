"""``realm train`` / ``python -m trainer.pretrain --config configs/pretrain/tiny.yaml [--section.key=value ...]``."""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import parse_flag_from_env

from realm.config import load_config
from realm.logging import init_logging
from realm.tracking import accelerator_kwargs
from trainer.config import PretrainConfig
from trainer.loop import Trainer

logger = logging.getLogger(__name__)


def cpu_safe_mixed_precision() -> str | None:
    """``"no"`` when the launcher asks for bf16/fp16 but this process trains on CPU, else None (the launcher's
    choice stands). CPU autocast is lossy and its speed varies by CPU; CPU runs here are tests and small runs that
    are compared against fp32 references, so they stay fp32 whatever the accelerate YAML says."""
    requested = os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
    on_gpu = torch.cuda.is_available() and not parse_flag_from_env("ACCELERATE_USE_CPU")
    return "no" if requested != "no" and not on_gpu else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="realm train", description="REALM pre-training (the trainer process).")
    parser.add_argument("--config", required=True, help="YAML file of a PretrainConfig")
    args, overrides = parser.parse_known_args(argv)
    cfg = load_config(PretrainConfig, args.config, overrides)
    precision = cpu_safe_mixed_precision()
    accelerator = Accelerator(**accelerator_kwargs(cfg.tracking, Path(cfg.train.run_dir)), mixed_precision=precision)
    init_logging(accelerator.is_main_process)
    if precision == "no":
        logger.warning(
            "mixed precision %s requested on CPU: training in fp32", os.environ["ACCELERATE_MIXED_PRECISION"]
        )
    trainer = Trainer(cfg, accelerator)
    try:
        summary = trainer.run()
        trainer.evaluate()
    finally:
        trainer.close()
    accelerator.print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
