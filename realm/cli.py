"""The ``realm`` command: thin dispatch to each process's own entry point.

realm demo                      embedded world -> vocabulary -> reader warm-up -> ICT -> pre-training -> eval -> QA
realm train --config C [...]    the trainer process          (python -m trainer.pretrain)
realm index --config C --run_dir RUN   the index-builder process   (python -m index_builder.build)
realm ict --config C [...]      Inverse Cloze Task warm start (python -m trainer.ict)
realm warmup --config C [...]   reader warm-up of a from-scratch encoder (python -m trainer.warmup)
realm world --out DIR           write the synthetic encyclopaedia as jsonl
realm vocab ...                 train a WordPiece vocabulary
realm blocks ...                cut a corpus (jsonl, DPR tsv, HF dataset) into blocks
realm evaluate-mlm RUN          held-out masked-fact metrics of a run or checkpoint
realm inspect RUN "query"       top-k retrieved blocks with their scores
realm report RUN                self-contained HTML report of a run
realm finetune --config C [...] open-domain QA fine-tuning    (python -m trainer.finetune)
realm evaluate OUT --task T --data F   QA exact match / retrieval accuracy (python -m trainer.qa_eval)
"""

from __future__ import annotations

import importlib
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("trainer.demo", "run the embedded demo end to end"),
    "train": ("trainer.pretrain", "the trainer process"),
    "index": ("index_builder.build", "the index-builder process"),
    "ict": ("trainer.ict", "Inverse Cloze Task warm start of the embedders"),
    "warmup": ("trainer.warmup", "reader warm-up of a from-scratch encoder on trivial retrievals"),
    "world": ("realm.tools", "write the synthetic encyclopaedia"),
    "vocab": ("realm.tools", "train a WordPiece vocabulary"),
    "blocks": ("realm.tools", "cut a corpus into blocks"),
    "evaluate-mlm": ("trainer.inspect", "held-out masked-fact metrics of a run or checkpoint"),
    "inspect": ("trainer.inspect", "top-k retrieved blocks for a query"),
    "report": ("trainer.report", "self-contained HTML report of a run from its own logs"),
    "finetune": ("trainer.finetune", "open-domain QA fine-tuning (span reader, frozen index)"),
    "evaluate": ("trainer.qa_eval", "exact match and top-k retrieval accuracy of a fine-tuned QA model"),
}


def _usage() -> str:
    lines = ["usage: realm COMMAND [options]", "", "commands:"]
    lines += [f"  {name:<14} {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "Run `realm COMMAND --help` for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        try:
            print(_usage())
        except BrokenPipeError:  # `realm --help | head`
            pass
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"realm: unknown command {command!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[command][0])
    entry = getattr(module, "main_" + command.replace("-", "_"), None) or module.main
    from realm.config import ConfigError
    from realm.jsonl import DataFileError

    try:
        return int(entry(rest) or 0)
    except (ConfigError, DataFileError, FileNotFoundError) as err:
        # user errors (bad config, malformed data, missing files) get one line, not a traceback
        print(f"realm {command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
