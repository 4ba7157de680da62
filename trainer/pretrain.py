"""``realm train`` / ``python -m trainer.pretrain --config configs/pretrain/tiny.yaml [--section.key=value ...]``."""

from __future__ import annotations

import argparse
import json
import logging

from realm.config import load_config
from realm.logging import init_logging
from realm.process_exit import exit_code_after_run
from trainer.accelerator import build_accelerator
from trainer.config import PretrainConfig
from trainer.loop import Trainer

logger = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="realm train", description="REALM pre-training (the trainer process).")
    parser.add_argument("--config", required=True, help="YAML file of a PretrainConfig")
    args, overrides = parser.parse_known_args(argv)
    cfg = load_config(PretrainConfig, args.config, overrides)
    accelerator = build_accelerator(cfg.tracking, cfg.train.run_dir)
    init_logging(accelerator.is_main_process)
    trainer = Trainer(cfg, accelerator)
    try:
        summary = trainer.run()
        trainer.evaluate()
    finally:
        trainer.close()
    accelerator.print(json.dumps(summary, indent=2))
    return exit_code_after_run(accelerator.num_processes, 0)


if __name__ == "__main__":
    raise SystemExit(main())
