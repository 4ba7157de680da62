"""A REALM stage long enough to matter (issue 55 items 3-4): from one finished real-text warm start, REALM
pre-training and its controls, each evaluated on cloze endpoints at fixed steps, per-item outcomes kept for the
pre-registered test (``experiments/real_text/realm_stage_analysis.py``).

    python -m experiments.real_text.realm_stage --start RUN --out OUT --cloze strict=R/reachable_strict.jsonl nq=Q/nq_linked.jsonl \\
        [--config configs/real_text/minilm.yaml] [--init-from DIR] [--rows warm,realm,closed_book,frozen] \\
        [--steps 3000] [--eval-at 0,1000,2000,3000] [--seed 0] [--set refresh.refresh_interval=100 ...] \
        [--pipeline-set tagging.kind=rule ...]
    python -m experiments.real_text.realm_stage --analyse OUT [OUT ...] [--json F]

``--cloze`` names every endpoint evaluated; ``--primary`` the ones tested (the Holm family,
``realm_stage_analysis.HOLM_FAMILY``; default all), fixed in ``OUT/stage.json`` before the first step.

``RUN`` is a ``realm real-text`` run folder with its warm start (``--stop_after=warm_start`` suffices): ``blocks``,
``cloze/pretrain.jsonl`` (X), ``warmup/encoder`` and ``ict/retriever``; ``--config`` is the real-text config that made
it (its pre-training recipe), ``--pipeline-set`` the real-text keys given on its command line (e.g.
``tagging.kind=rule``; its ``pretrain_overrides`` go to ``--set``), ``--init-from`` its ``init_from`` (default:
all-MiniLM-L6-v2's folder, unless RUN has its own ``tokenizer``, i.e. started from scratch). Each row's pre-training
config is the pipeline's own (``realm.pipeline.real_text.pretrain_config``), then ``--set`` (dotted pre-training
keys), then the row's ``ROW_SETTINGS``, into ``OUT/ROW``. Rows: ``warm`` (the start itself, evaluated at step 0
only: every row's step 0 is this model), ``realm``, ``closed_book`` (``train.loss=closed_book``) and ``frozen``
(``retriever.frozen=true``).

Resumable, and the schedule does not depend on how often it was resumed: every row has ``train.max_steps = --steps``
(the learning-rate schedule's length), checkpoints every gcd of the evaluation steps, and each invocation of the trainer
stops at the next evaluation step (``train.stop_at_step``), whose checkpoint is then evaluated. A rerun skips
evaluations already written (``OUT/ROW/stage_eval/step-N.json``), evaluates a checkpoint waiting for it, and resumes
training from the row's newest checkpoint. ``OUT/stage.json`` records the settings; a rerun with others is refused. The
sentences of every ``heldout_sentences.txt`` beside a ``--cloze`` file (``experiments/real_text/reachable_cloze.py``
writes one) are left out of X (``data.heldout_sentences``); the start's warm-up and ICT must have skipped them too.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path

from benchmarks.harness import REPO, BenchError, minilm_path, write_json  # noqa: E402 isort:skip  (first)

import torch  # noqa: E402
from experiments.common.cloze_eval import evaluate_loaded  # noqa: E402
from experiments.real_text.realm_stage_analysis import (  # noqa: E402
    STAGE_FILE, AnalysisError, analyse, eval_file, format_analysis,
)

from realm.core.atomic import write_text_atomic  # noqa: E402
from realm.core.config import load_config, parse_overrides, save_config  # noqa: E402
from realm.core.logging import init_logging  # noqa: E402
from realm.data.block_store import BlockStore  # noqa: E402
from realm.data.blocks import load_blocks  # noqa: E402
from realm.data.cloze_sets import ClozeSets  # noqa: E402
from realm.data.packing import SpecialIds  # noqa: E402
from realm.data.vocab import load_tokenizer  # noqa: E402
from realm.pipeline import layout  # noqa: E402
from realm.pipeline.real_text import RealTextConfig, pretrain_config  # noqa: E402
from realm.pretrain.config import PretrainConfig  # noqa: E402
from realm.pretrain.data import HELDOUT_SENTENCES_FILE  # noqa: E402
from realm.pretrain.model import build_model  # noqa: E402
from realm.pretrain.saved_run import LoadedRun, load_run  # noqa: E402
from realm.run.layout import CHECKPOINT_PREFIX, CONFIG_FILE, checkpoints_dir  # noqa: E402
from realm.run.publication import list_published  # noqa: E402
from realm.trainer.pretrain_loop import Trainer  # noqa: E402
from realm.training.accelerator import build_accelerator  # noqa: E402

ROWS = ("warm", "realm", "closed_book", "frozen")
ROW_SETTINGS: dict[str, tuple[str, ...] | None] = {
    "warm": None,  # no training: the shared start
    "realm": (),
    "closed_book": ("train.loss=closed_book",),
    "frozen": ("retriever.frozen=true",),
}
"""Each row's pre-training keys, applied after ``--set`` so that no ``--set`` can undo what defines the row."""
RECORDED = ("start", "config", "pipeline_set", "init_from", "seed", "steps", "eval_at", "cloze", "primary", "set",
            "heldout_sentences")
"""``stage.json``'s keys: a rerun must agree on all of them (rows may be added)."""


def row_overrides(row: str, sets: list[str]) -> list[str] | None:
    """The row's dotted overrides (``--key=value``), or None for a row that does not train."""
    if row not in ROW_SETTINGS:
        raise BenchError(f"--rows: unknown row {row!r} (known: {', '.join(ROWS)})")
    settings = ROW_SETTINGS[row]
    return None if settings is None else [f"--{s}" for s in (*sets, *settings)]


def row_steps(row: str, eval_at: list[int]) -> list[int]:
    """The steps a row is evaluated at: ``warm`` at 0 (when asked), a training row at the others (its step 0 is the
    warm start, which ``warm`` evaluates)."""
    return [s for s in eval_at if s == 0] if ROW_SETTINGS[row] is None else [s for s in eval_at if s > 0]


def save_interval(eval_at: list[int]) -> int:
    """Checkpoints every gcd of the positive evaluation steps, so a checkpoint exists at each of them."""
    return math.gcd(*[s for s in eval_at if s > 0]) or 1


def next_action(steps: list[int], evaluated: set[int], checkpoints: set[int]) -> tuple[str, int] | None:
    """What a row does next: ``("evaluate", s)`` for the first step not evaluated whose model exists (step 0: the
    start), ``("train", s)`` to train up to it, or None when every step is evaluated. A row whose newest checkpoint
    is past an unevaluated step without a checkpoint at it cannot be evaluated as planned: ``BenchError``."""
    for step in sorted(steps):
        if step in evaluated:
            continue
        if step == 0 or step in checkpoints:
            return "evaluate", step
        if checkpoints and max(checkpoints) > step:
            raise BenchError(f"the row trained past step {step} (checkpoint {max(checkpoints)}) without a checkpoint "
                             f"at it: evaluate it from a copy or start the row again in a new --out")  # fmt: skip
        return "train", step
    return None


def start_config(args: argparse.Namespace, row: str, out: Path) -> PretrainConfig:
    """The pipeline's pre-training config of ``--start``, with ``--set``, the row's keys, the stage's schedule and
    the held-out sentences, writing to ``out/row``."""
    start = Path(args.start)
    for need in (layout.blocks_dir(start), layout.cloze_file(start, "pretrain"), layout.ict_retriever(start)):
        if not need.exists():
            raise BenchError(f"--start {start}: no {need.relative_to(start)} (run `realm real-text "
                             "--stop_after=warm_start` first)")  # fmt: skip
    sections = parse_overrides(row_overrides(row, args.set) or [f"--{s}" for s in args.set])
    if args.heldout_sentences:
        sections.setdefault("data", {})["heldout_sentences"] = args.heldout_sentences
    own = {"out": str(start), "seed": args.seed, "init_from": args.init_from, "pretrain_overrides": sections}
    pipeline = parse_overrides([f"--{s}" for s in args.pipeline_set])
    if set(pipeline) & set(own):
        raise BenchError(f"--pipeline-set: {', '.join(sorted(set(pipeline) & set(own)))} have options of their own "
                         f"(--start, --seed, --init-from, --set)")  # fmt: skip
    cfg = load_config(RealTextConfig, args.config, {**pipeline, **own})
    data = {"tokenizer": args.init_from or str(layout.tokenizer_dir(start)), "blocks": str(layout.blocks_dir(start))}
    sets = ClozeSets(pretrain=layout.cloze_file(start, "pretrain"), heldout=layout.cloze_file(start, "heldout"),
                     num_pretrain=0, num_heldout=0, num_heldout_without_span=0, num_short=0)  # fmt: skip
    pre = pretrain_config(cfg, data, sets, warmed=layout.warmup_encoder(start).is_dir())
    pre.train = dataclasses.replace(pre.train, run_dir=str(out / row), max_steps=args.steps,
                                    save_interval=save_interval(args.eval_at))  # fmt: skip
    return pre


def start_model(cfg: PretrainConfig) -> LoadedRun:
    """The trainer's starting model (the warm starts of ``cfg``), as ``load_run`` gives a checkpoint's, at step 0."""
    tokenizer = load_tokenizer(cfg.data.tokenizer)
    store = BlockStore(load_blocks(cfg.data.blocks))
    model = build_model(cfg, len(tokenizer)).eval()
    return LoadedRun(Path(cfg.train.run_dir), cfg, tokenizer, SpecialIds.of(tokenizer), store, model,
                     Path(cfg.train.init_retriever), 0, cfg.data.tokenizer, cfg.data.blocks)  # fmt: skip


def train_to(cfg: PretrainConfig, step: int) -> None:
    """Pre-trains the row (resuming from its newest checkpoint) up to ``step``, where it saves a checkpoint."""
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, stop_at_step=step))
    trainer = Trainer(cfg, build_accelerator(cfg.tracking, cfg.train.run_dir, cfg.train.precision))
    try:
        trainer.run()
    finally:
        trainer.close()


def run_row(args: argparse.Namespace, row: str, out: Path, files: dict[str, Path], device: str) -> None:
    cfg = start_config(args, row, out)
    row_dir = Path(cfg.train.run_dir)
    row_dir.mkdir(parents=True, exist_ok=True)
    if ROW_SETTINGS[row] is None and not (row_dir / CONFIG_FILE).is_file():
        save_config(cfg, row_dir / CONFIG_FILE)  # note: the trained rows' trainer writes its own
    steps = row_steps(row, args.eval_at)
    while True:
        evaluated = {s for s in steps if eval_file(row_dir, s).is_file()}
        checkpoints = dict(list_published(checkpoints_dir(row_dir), CHECKPOINT_PREFIX))
        action = next_action(steps, evaluated, set(checkpoints))
        if action is None:
            return
        what, step = action
        print(f"[realm_stage] {row}: {what} step {step}", flush=True)
        if what == "train":
            train_to(cfg, step)
            continue
        run = start_model(cfg) if step == 0 else load_run(row_dir, str(checkpoints[step]))
        run.model.to(device)
        result = {"row": row, "seed": args.seed, "checkpoint": str(run.checkpoint), **evaluate_loaded(run, files)}
        path = eval_file(row_dir, step)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(result) + "\n")


def check_stage(out: Path, record: dict) -> None:
    """Writes ``out/stage.json``, or checks that a rerun agrees with the one there."""
    path = out / STAGE_FILE
    if path.is_file():
        old = json.loads(path.read_text(encoding="utf-8"))
        changed = [key for key in RECORDED if old.get(key) != record.get(key)]
        if changed:
            raise BenchError(f"{path} records other settings ({', '.join(changed)}): rerun with the same ones or use "
                             f"a new --out")  # fmt: skip
    else:
        out.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(record, indent=2) + "\n")


def cloze_files(specs: list[str]) -> dict[str, Path]:
    files = {}
    for spec in specs:
        name, _, path = spec.partition("=")
        if not (name and path and Path(path).is_file()):
            raise BenchError(f"--cloze: expected NAME=PATH of an existing cloze jsonl, got {spec!r}")
        files[name] = Path(path)
    return files


def heldout_sentences(files: dict[str, Path]) -> str:
    """The one ``heldout_sentences.txt`` beside the cloze files ("" without one)."""
    found = sorted({str(p.parent / HELDOUT_SENTENCES_FILE) for p in files.values()
                    if (p.parent / HELDOUT_SENTENCES_FILE).is_file()})  # fmt: skip
    if len(found) > 1:
        raise BenchError(f"the --cloze files have several {HELDOUT_SENTENCES_FILE} ({', '.join(found)}): merge them "
                         f"into one and pass --heldout-sentences")  # fmt: skip
    return found[0] if found else ""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--analyse", nargs="+", metavar="OUT", help="analyse these --out folders (one per seed)")
    parser.add_argument("--json", default=None, help="with --analyse: write the analysis here")
    parser.add_argument("--start", help="a real-text run folder with its warm start")
    parser.add_argument("--out", help="the stage's folder (one per seed)")
    parser.add_argument("--config", default=str(REPO / "configs/real_text/minilm.yaml"))
    parser.add_argument("--init-from", default=None, help="the start's init_from (default: see above)")
    parser.add_argument("--pipeline-set", action="append", default=[], metavar="KEY=VALUE",
                        help="a real-text key the start was made with (e.g. tagging.kind=rule)")
    parser.add_argument("--cloze", nargs="+", default=[], help="NAME=PATH endpoint files (held-out cloze schema)")
    parser.add_argument("--primary", default=None, help="the tested endpoints, comma-separated (default: all)")
    parser.add_argument("--heldout-sentences", default=None, help="sentences X must skip (default: see above)")
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--eval-at", default="0,1000,2000,3000")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a pre-training key")
    parser.add_argument("--device", default="auto", help="where evaluations run (auto: cuda when there is one)")
    args = parser.parse_args(argv)
    if args.analyse:
        return args
    if not (args.start and args.out and args.cloze):
        parser.error("--start, --out and --cloze are needed (or --analyse OUT ...)")
    try:
        args.eval_at = sorted({int(s) for s in args.eval_at.split(",")})
    except ValueError:
        parser.error(f"--eval-at: expected comma-separated steps, got {args.eval_at!r}")
    if args.eval_at[0] < 0 or args.eval_at[-1] != args.steps:
        parser.error(f"--eval-at must lie in 0..--steps and end at --steps ({args.steps}), got {args.eval_at}")
    args.rows = [row.strip() for row in args.rows.split(",") if row.strip()]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    init_logging()
    try:
        if args.analyse:
            result = analyse([Path(out) for out in args.analyse])
            print(format_analysis(result))
            write_json(args.json, result)
            return 0
        files = cloze_files(args.cloze)
        args.primary = sorted(args.primary.split(",") if args.primary else files)
        if set(args.primary) - set(files):
            raise BenchError(f"--primary names no --cloze endpoint: {sorted(set(args.primary) - set(files))}")
        for row in args.rows:
            row_overrides(row, [])  # note: an unknown row is refused before any row trains
        if args.init_from is None and not layout.tokenizer_dir(args.start).is_dir():
            args.init_from = str(minilm_path())
        if args.heldout_sentences is None:
            args.heldout_sentences = heldout_sentences(files)
        out = Path(args.out)
        check_stage(out, {**{k: getattr(args, k) for k in RECORDED if k != "cloze"},
                          "cloze": {name: str(path) for name, path in files.items()}})  # fmt: skip
        device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
        for row in args.rows:
            run_row(args, row, out, files, device)
        result = analyse([out])
        write_text_atomic(out / "summary.md", format_analysis(result) + "\n")
        write_json(out / "summary.json", result)
        print(format_analysis(result))
    except (BenchError, AnalysisError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
