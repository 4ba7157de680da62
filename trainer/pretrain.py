"""``realm train`` / ``python -m realm.trainer.pretrain --config configs/pretrain/tiny.yaml [--section.key=value ...]``
(the same process)."""

from __future__ import annotations

import json
import logging
import sys

from realm.core.config import config_from_command_line
from realm.core.errors import run_command
from realm.core.logging import init_logging
from realm.core.process_exit import exit_code_after_run
from realm.pretrain.config import PretrainConfig
from realm.pretrain.export import write_finished_model
from realm.trainer.pretrain_loop import Trainer
from realm.training.accelerator import build_accelerator

logger = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> int:
    cfg = config_from_command_line(
        PretrainConfig, argv, "realm train", "REALM pre-training (the trainer process).", config_required=True
    )
    accelerator = build_accelerator(cfg.tracking, cfg.train.run_dir, cfg.train.precision)
    init_logging(accelerator.is_main_process)
    trainer = Trainer(cfg, accelerator)
    try:
        summary = trainer.run()
        trainer.evaluate()
        # RUN/model/{encoder,retriever}: the trained networks as transformers / sentence-transformers load them
        summary |= write_finished_model(trainer.run_dir, trainer.unwrapped, trainer.tokenizer, cfg, trainer.step,
                                        accelerator.is_main_process)  # fmt: skip
    finally:
        trainer.close()
    accelerator.print(json.dumps(summary, indent=2))
    return exit_code_after_run(accelerator.num_processes, 0)


if __name__ == "__main__":
    raise SystemExit(run_command("realm train", main, sys.argv[1:]))
