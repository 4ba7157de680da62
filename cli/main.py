"""The ``realm`` command: an explicit table from command names to the functions that run them.

realm demo                      embedded world -> vocabulary -> reader warm-up -> ICT -> pre-training -> eval -> QA
realm train --config C [...]    the trainer process                  (python -m realm.trainer.pretrain)
realm index --config C [...]    the index-builder process            (python -m realm.index_builder.watch)
realm ict --config C [...]      Inverse Cloze Task warm start        (python -m realm.warmstart.ict_train)
realm warmup --config C [...]   reader warm-up of a from-scratch encoder (python -m realm.warmstart.warmup)
realm finetune --config C [...] open-domain QA fine-tuning           (python -m realm.finetune.train)
realm evaluate OUT --task T --data F   QA exact match / retrieval accuracy (python -m realm.finetune.evaluate_qa)
realm world --out DIR           write the synthetic encyclopaedia as jsonl
realm vocab ...                 train a WordPiece vocabulary
realm blocks ...                cut a corpus (jsonl, DPR tsv, HF dataset) into blocks
realm tag --config C --workers N  tag the pre-training sentences into the trainer's cache ahead of a job
realm evaluate-mlm RUN          held-out masked-fact metrics of a run or checkpoint
realm inspect RUN "query"       top-k retrieved blocks with their scores
realm report RUN                self-contained HTML report of a run
realm launch pretrain|... [...]  a launch/ script (accelerate topologies, GPUs, Slurm); `realm launch copy` puts
                                them into a project folder (cli/launch.py)
realm export RUN OUT --format F the encoder (hf), retriever (sentence-transformers) or index (pyserini) of a run
realm knnlm train-lm|build|evaluate|sweep|tune|inspect   kNN-LM: tiny causal LM, token datastore, perplexity,
                                neighbours of a token (knnlm_jobs/)

Commands that run a training job or a process take a YAML config and dotted overrides (``--section.key=value``);
``realm COMMAND --help`` lists them. A user error (bad config, data file, missing file or run) is one line on stderr
and exit code 2 (``realm.core.errors.run_command``).
"""

from __future__ import annotations

import importlib
import sys

from realm.core.config_help import did_you_mean
from realm.core.errors import USER_ERROR_EXIT_CODE, run_command

COMMANDS: dict[str, tuple[str, str]] = {
    # name: ("module:function", help); modules are imported on use, so `realm --help` starts fast
    "demo": ("realm.cli.demo:main", "run the embedded demo end to end"),
    "real-text": ("realm.cli.real_text:main", "REALM on a real corpus and QA files end to end (Wikipedia -> NQ)"),
    "train": ("realm.trainer.pretrain:main", "the trainer process (REALM pre-training)"),
    "index": ("realm.index_builder.watch:main", "the index-builder process"),
    "ict": ("realm.warmstart.ict_train:main", "Inverse Cloze Task warm start of the embedders"),
    "warmup": ("realm.warmstart.warmup:main", "reader warm-up of a from-scratch encoder on trivial retrievals"),
    "finetune": ("realm.finetune.train:main", "open-domain QA fine-tuning (span reader, frozen index)"),
    "evaluate": ("realm.finetune.evaluate_qa:main", "exact match and top-k retrieval accuracy of a fine-tuned QA run"),
    "world": ("realm.cli.data:main_world", "write the synthetic encyclopaedia"),
    "vocab": ("realm.cli.data:main_vocab", "train a WordPiece vocabulary"),
    "blocks": ("realm.cli.data:main_blocks", "cut a corpus into blocks"),
    "tag": ("realm.cli.data:main_tag", "tag the pre-training sentences ahead of a job (N processes, resumable)"),
    "evaluate-mlm": ("realm.cli.inspect:main_evaluate_mlm", "held-out masked-fact metrics of a run or checkpoint"),
    "inspect": ("realm.cli.inspect:main_inspect", "top-k retrieved blocks for a query"),
    "report": ("realm.cli.report:main", "self-contained HTML report of a run from its own logs"),
    "launch": ("realm.cli.launch:main", "run a launch/ script (pretrain, finetune, ...), or copy them into a folder"),
    "export": ("realm.cli.export:main", "a run's encoder, retriever or index as hf, sentence-transformers or pyserini"),
    "knnlm train-lm": ("realm.knnlm_jobs.train_lm:main", "train a tiny GPT-2 on a corpus (demo, tests, benchmark)"),
    "knnlm build": ("realm.knnlm_jobs.build_datastore:main", "build a kNN-LM token datastore (1 or N processes)"),
    "knnlm evaluate": ("realm.knnlm_jobs.evaluate_lm:main", "perplexity with and without a kNN-LM datastore"),
    "knnlm sweep": ("realm.knnlm_jobs.sweep:main", "kNN-LM perplexity over a grid of k, tau and lambda"),
    "knnlm tune": ("realm.knnlm_jobs.tune:main", "choose k, tau, lambda on validation, report test once with a CI"),
    "knnlm inspect": ("realm.knnlm_jobs.inspect:main", "a token's nearest datastore entries and why it got its p"),
}


def _usage(group: str = "") -> str:
    """The command table, or a group's subcommands (``realm knnlm --help``)."""
    what, prefix = ("SUBCOMMAND", f"{group} ") if group else ("COMMAND", "")
    lines = [f"usage: realm {prefix}{what} [options]", "", f"{what.lower()}s:"]
    lines += [f"  {name.removeprefix(prefix):<16} {help_}" for name, (_, help_) in COMMANDS.items()
              if name.startswith(prefix)]  # fmt: skip
    lines += ["", f"Run `realm {prefix}{what} --help` for a {what.lower()}'s options."]
    return "\n".join(lines)


def resolve(command: str):
    """The function that runs ``command``."""
    module, function = COMMANDS[command][0].split(":")
    return getattr(importlib.import_module(module), function)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        try:
            print(_usage())
        except BrokenPipeError:  # `realm --help | head`
            pass
        return 0 if argv else USER_ERROR_EXIT_CODE
    command, rest = argv[0], argv[1:]
    if " ".join(argv[:2]) in COMMANDS:  # note: two-word commands ("knnlm build")
        command, rest = " ".join(argv[:2]), argv[2:]
    subcommands = [name.split(" ", 1)[1] for name in COMMANDS if name.startswith(f"{command} ")]
    if command not in COMMANDS and subcommands and rest[:1] in (["-h"], ["--help"]):
        print(_usage(command))
        return 0
    if command not in COMMANDS and subcommands:
        hint = did_you_mean(rest[0], subcommands) if rest else ""
        given = f"unknown subcommand {rest[0]!r}{hint}" if rest else "a subcommand is needed"
        print(f"realm {command}: {given}; one of: {', '.join(subcommands)}", file=sys.stderr)
        return USER_ERROR_EXIT_CODE
    if command not in COMMANDS:
        hint = did_you_mean(command, [name.split(" ")[0] for name in COMMANDS])
        print(f"realm: unknown command {command!r}{hint}; `realm --help` lists the commands", file=sys.stderr)
        return USER_ERROR_EXIT_CODE
    return run_command(f"realm {command}", resolve(command), rest)


if __name__ == "__main__":
    raise SystemExit(main())
