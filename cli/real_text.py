"""``realm real-text``: REALM on real text end to end, the real-data twin of ``realm demo``.

    realm real-text [--config configs/real_text/default.yaml] [--section.key=value ...]

corpus -> vocabulary -> blocks -> cloze sets -> reader warm-up -> ICT -> REALM pre-training (index builder as a child
process) -> held-out span accuracy -> QA fine-tuning -> exact match. The stages are ``realm.pipeline.real_text``; this
command only reads the config (the pre-training sections, ``--train.*``, ``--optim.*``, ``--tracking.*``, ..., go to
its ``pretrain_overrides``), runs them and prints the table.
"""

from __future__ import annotations

import sys

from realm.cli.summary_table import closing_lines, format_rows
from realm.core.config import config_from_command_line
from realm.core.errors import run_command
from realm.core.logging import init_logging
from realm.pipeline.real_text import RealTextConfig, run_real_text
from realm.pretrain.config import PretrainConfig

DEFAULT_CONFIG = "configs/real_text/default.yaml"

ROWS = (
    ("held-out accuracy, with retrieval, before pre-training", "heldout_accuracy_retrieval_start"),
    ("held-out accuracy, with retrieval", "heldout_accuracy_retrieval"),
    ("held-out accuracy, closed book", "heldout_accuracy_closed_book"),
    ("QA exact match before fine-tuning", "qa_exact_match_start"),
    ("QA exact match after fine-tuning", "qa_exact_match_end"),
    ("QA top-5 accuracy after fine-tuning", "qa_top5_accuracy_end"),
    ("index refreshes", "num_index_refreshes"),
    ("trainer wait fraction", "trainer_wait_fraction"),
    ("wall seconds", "wall_seconds"),
)


def format_table(summary: dict) -> str:
    return format_rows("REALM on real text", [(name, summary[key]) for name, key in ROWS if key in summary])


def main(argv: list[str] | None = None) -> int:
    cfg = config_from_command_line(RealTextConfig, list(sys.argv[1:] if argv is None else argv), "realm real-text",
                                   __doc__.splitlines()[0], default_config=DEFAULT_CONFIG,
                                   passthrough=("pretrain_overrides", PretrainConfig))  # fmt: skip
    init_logging()
    print(format_table(run_real_text(cfg)))
    print(f"\n{closing_lines(cfg.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_command("realm real-text", main, sys.argv[1:]))
