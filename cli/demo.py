"""``realm demo``: the whole REALM pipeline on the embedded synthetic world, on CPU, with no downloads.

world -> vocabulary -> blocks -> reader warm-up -> ICT -> pre-training (trainer + live index builder) -> held-out
evaluation -> QA fine-tuning. The stages are ``realm.pipeline.demo``; this command reads its dotted keys
(``--num_entities=300 --warm_start.ict_steps=100 --qa_steps=0``) into a ``DemoConfig``, and the pre-training
sections (``--train.*``, ``--optim.*``, ``--tracking.*``, ...) into its ``pretrain_overrides``; runs them and prints
the table (``RUN/summary.json`` holds the figures).
"""

from __future__ import annotations

import dataclasses
import sys

from realm.cli.summary_table import closing_lines, format_rows
from realm.core.config import config_from_command_line, read_yaml
from realm.core.errors import ConfigError, run_command
from realm.core.logging import init_logging, set_num_threads
from realm.pipeline.demo import DemoConfig, run_demo
from realm.pretrain.config import PretrainConfig

DEPRECATED = {
    "--entities": "--num_entities", "--warmup-steps": "--warm_start.warmup_steps",
    "--ict-steps": "--warm_start.ict_steps", "--steps": "--pretrain_steps", "--threads": "--num_threads",
    "--qa-dev": "--max_dev_questions", "--warmup-config": "--warm_start.warmup_config",
    "--ict-config": "--warm_start.ict_config", "--config": "--pretrain_config", "--qa-config": "--finetune_config",
}  # fmt: skip
"""The demo's flags before it took ``DemoConfig``'s dotted keys (``--qa-steps``, ``--vocab-size``, ``--out``,
``--seed`` and ``--precision`` still are keys): aliases for one release, with a one-line note. ``--config`` of a
pre-training recipe is one of them; ``--config`` of a demo config (``DemoConfig`` keys) is that."""


def translate_deprecated(argv: list[str]) -> tuple[list[str], list[str]]:
    """``argv`` with the deprecated flags (``--entities 100``, ``--steps=6``, ``--clean-warm-start``) spelled as
    ``DemoConfig`` keys, and the flags it translated. ``--config`` naming a pre-training recipe is the old
    ``--pretrain_config``; naming a demo config (only ``DemoConfig`` keys), it is that, as for every command."""
    out, used = [], []
    for i, arg in enumerate(argv):
        flag, sep, value = arg.partition("=")
        if flag == "--config" and _is_demo_config(value if sep else (argv[i + 1:] or [""])[0]):
            out.append(arg)
            continue
        if arg == "--clean-warm-start":
            out.append("--warm_start_reads_heldout=false")
        elif flag in DEPRECATED:
            out.append(DEPRECATED[flag] + sep + value)
        else:
            out.append(arg)
            continue
        used.append(flag)
    return out, used


def _is_demo_config(path: str) -> bool:
    """Whether ``path`` is a YAML file of ``DemoConfig`` keys (a pre-training recipe has sections it lacks)."""
    try:
        keys = set(read_yaml(path))
    except ConfigError:
        return False  # note: a missing file is reported once, by whichever config reads it
    return keys <= {f.name for f in dataclasses.fields(DemoConfig)}


def demo_config(argv: list[str]) -> DemoConfig:
    """The demo's typed config from its command line (``--help`` and ``--print_config`` exit here)."""
    argv, used = translate_deprecated(argv)
    if used:
        new = ", ".join(f"{flag} -> {DEPRECATED.get(flag, '--warm_start_reads_heldout=false')}" for flag in used)
        print(f"realm demo: deprecated flags, use the dotted keys (the old spelling goes in the next release): {new}",
              file=sys.stderr)  # fmt: skip
    return config_from_command_line(DemoConfig, argv, "realm demo", __doc__,
                                    passthrough=("pretrain_overrides", PretrainConfig))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    cfg = demo_config(list(sys.argv[1:] if argv is None else argv))
    init_logging()
    set_num_threads(cfg.num_threads)
    print(format_table(run_demo(cfg)))
    print(f"\n{closing_lines(cfg.out)}")
    return 0


def format_table(summary: dict) -> str:
    rows = [
        ("held-out accuracy, with retrieval", summary["heldout_accuracy_retrieval"]),
        ("held-out accuracy, closed book", summary["heldout_accuracy_closed_book"]),
        (f"gold recall@{summary['k']} before pre-training", summary["gold_recall_at_k_start"]),
        (f"gold recall@{summary['k']} after pre-training", summary["gold_recall_at_k_end"]),
        ("index refreshes", summary["num_index_refreshes"]),
        *(
            [
                ("QA exact match before fine-tuning", summary["qa_exact_match_start"]),
                ("QA exact match after fine-tuning", summary["qa_exact_match_end"]),
            ]
            if "qa_exact_match_end" in summary
            else []
        ),
        ("trainer wait fraction", summary["trainer_wait_fraction"]),
        ("wall seconds", summary["wall_seconds"]),
    ]
    return format_rows("REALM demo", rows)


if __name__ == "__main__":
    raise SystemExit(run_command("realm demo", main, sys.argv[1:]))
