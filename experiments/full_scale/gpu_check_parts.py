"""The parts of ``experiments/full_scale/gpu_check.py``, in the order they run: for each, the command (on a GPU, and
shrunk for the CPU dry run), its time limit on an H200 and how its figures are read from what it wrote.

Sizing (one H200; each limit bounds what a part may take, not what it is expected to, and the check as a whole
keeps to its 8-minute budget): the trainer step at BERT-base and at the demo shape (bf16, candidates
prefetched, as ``docs/performance.md``'s table has them); the builder at BERT-base (bf16, 1 and 2 processes on the
one GPU, ``embed_blocks`` against a bare forward); exact ``TorchIndex`` search at 13,353,718 x 128 fp16; the GPU
demo; the GPU-touching tests. The limits are the first check's times on an H200 (2026-11-29) with room: the step at
BERT-base took 35 s on a warm machine and over 45 s as the first CUDA program of a fresh one, the builder 66 and
79 s, the search 17 s, the tests 85 s (one of them 47 s). The demo, its stages before pre-training shortened (its
pre-training keeps the 600 steps the trainer's wait and the live builder's throughput come from), had reached step
423 of 600 after 135 s. The real-text GPU config, even shortened (500 of its 1,000 pre-training steps, two refreshes
after the first index), takes about 5 minutes: it is no part of the 8-minute command but a command of its own
(``--parts real_text``), as is each pipeline with every stage at its config's length (``--parts demo
--full-pipelines --budget 520``, and the same with ``real_text``). The limits add up to more than the budget: the
tests, last, get what is left of it.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from benchmarks.harness import REPO

BERT_BASE = ["--hidden", "768", "--layers", "12", "--heads", "12", "--intermediate", "3072", "--vocab", "30522"]
TINY = ["--hidden", "32", "--layers", "1", "--heads", "2", "--intermediate", "64", "--vocab", "300"]
REAL_TEXT_FILES = {"corpus.path": "summaries_en-us.json", "qa.train": "topics.dpr.nq.dev.txt",
                   "qa.dev": "NQ-open.dev.jsonl"}  # fmt: skip
"""The real-text GPU config's data files (``configs/real_text/gpu.yaml``), looked for in the check's data folder."""


@dataclass(kw_only=True, slots=True)
class Context:
    """What every part's command is built from."""

    out: Path
    """The check's folder: a part writes under ``out/NAME/``."""
    dry_run: bool = False
    """CPU, every shape shrunk: the same code paths in seconds."""
    pipelines_in_dry_run: bool = False
    """Also the demo at CI size in a dry run (about 1.5 minutes on 2 CPU cores); otherwise it is skipped."""
    full_pipelines: bool = False
    """Every pipeline stage at its config's length (otherwise the stages before pre-training are shortened)."""
    requested: tuple[str, ...] = ()
    """The parts named by ``--parts`` (a part that runs only on request, the real-text pipeline, runs when named)."""
    data: Path = REPO / ".gpu_check" / "data"
    """The real-text data files (``bash experiments/full_scale/gpu_check.sh --prepare`` copies them there)."""
    python: str = sys.executable

    def dir(self, name: str) -> Path:
        return self.out / name


@dataclass(kw_only=True, slots=True)
class Part:
    """One part: its own process, log and time limit."""

    name: str
    timeout_s: float
    """Seconds on an H200 before the part is stopped and recorded as ``timeout``."""
    command: Callable[[Context], list[str]]
    """The argv, run from the repository root."""
    collect: Callable[[Path], dict[str, Any]]
    """The figures, from the part's folder (also tried after a failure: a test run with failures has counts)."""
    skip: Callable[[Context], str | None] = field(default=lambda ctx: None)
    """Why the part does not run here (None: it runs)."""
    dry_timeout_s: float = 120.0
    """The limit in a dry run."""
    full_timeout_s: float | None = None
    """The limit with ``--full-pipelines`` (None: ``timeout_s``)."""

    def limit(self, ctx: Context) -> float:
        """This part's limit in ``ctx`` (dry run, full pipelines or neither)."""
        if ctx.dry_run:
            return self.dry_timeout_s
        return self.full_timeout_s if ctx.full_pipelines and self.full_timeout_s else self.timeout_s


SEARCH, PIPELINE = f"{__package__}.gpu_check_search", f"{__package__}.gpu_check_pipeline"
"""This study's own parts, run as modules like the speed checks (``benchmarks.step``, ``benchmarks.builder``)."""


def _module(ctx: Context, module: str, *args: str) -> list[str]:
    """``python -m MODULE ARGS`` (a speed check in ``benchmarks``, or one of this study's own parts), run from the
    repository root (``run_part``'s ``cwd``)."""
    return [ctx.python, "-m", module, *args]


def gpu_test_files() -> list[str]:
    """The test files that touch CUDA (name it in their text), this check's own test left out."""
    files = [p for p in sorted((REPO / "tests").rglob("test_*.py")) if "cuda" in p.read_text(encoding="utf-8")]
    return [str(p.relative_to(REPO)) for p in files if p.name != "test_gpu_check.py"]


def tests_command(ctx: Context) -> list[str]:
    files = ["tests/unit/core/test_prefetch.py"] if ctx.dry_run else gpu_test_files()
    workers = [] if ctx.dry_run else ["-n", "8"]
    return [ctx.python, "-m", "pytest", "-q", "-o", "addopts=", "-p", "no:cacheprovider", *workers,
            f"--junitxml={ctx.dir('tests') / 'junit.xml'}", *files]  # fmt: skip


def tests_figures(folder: Path) -> dict[str, Any]:
    suites = ElementTree.parse(folder / "junit.xml").getroot()
    suites = [suites] if suites.tag == "testsuite" else list(suites)
    counts = {key: sum(int(s.get(key, 0)) for s in suites) for key in ("tests", "failures", "errors", "skipped")}
    failed = [f"{case.get('classname')}::{case.get('name')}" for s in suites for case in s.iter("testcase")
              if case.find("failure") is not None or case.find("error") is not None]  # fmt: skip
    return {**counts, "passed": counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"],
            "failed_tests": failed[:20]}  # fmt: skip


def step_command(name: str, shape: list[str], steps: str) -> Callable[[Context], list[str]]:
    """``benchmarks/step.py`` at ``shape`` (its flags; none: the demo shape), bf16 with candidates prefetched."""

    def command(ctx: Context) -> list[str]:
        if ctx.dry_run:
            sized = [*TINY, "--batch", "2", "--block-len", "32", "--body-len", "24", "--corpus", "64", "--steps", "1",
                     "--warmup", "1", "--peak-size", "128", "--qa-beam", "6", "--threads", "2"]  # fmt: skip
        else:
            sized = [*shape, "--steps", steps, "--warmup", "3", "--peak-size", "8192"]
        return _module(ctx, "benchmarks.step", "--bf16", "--prefetch", *sized,
                       "--json", str(ctx.dir(name) / "step.json"))  # fmt: skip

    return command


def step_figures(folder: Path) -> dict[str, Any]:
    result = _read_json(folder / "step.json")
    rows = result["rows"]
    realm, plain = rows["REALM step [bf16]"], rows["BERT MLM, all seqs [bf16]"]
    prefetched = rows.get("REALM step, prefetched [bf16]")
    return {
        "seq_shapes": result["seq_shapes"],
        "bf16_peak_tflops": result["peak_flops"]["bf16"] / 1e12,
        "realm_ms": realm["ms"],
        "realm_mfu_bf16": realm["mfu_bf16_peak"],
        "prefetched_ms": prefetched["ms"] if prefetched else None,
        "prefetch_speedup": prefetched["realm_over_this"] if prefetched else None,
        "plain_mlm_all_seqs_ms": plain["ms"],
        "plain_mlm_all_seqs_mfu_bf16": plain["mfu_bf16_peak"],
        "realm_over_plain_all_seqs": plain["realm_over_this"],
        "qa_step_ms": rows["QA fine-tuning step [bf16]"]["ms"],
        "realm_parts_ms": {label.split(" / ")[1]: row["ms"] for label, row in rows.items()
                           if label.startswith("REALM step [bf16] / ")},  # fmt: skip
    }


def builder_command(ctx: Context) -> list[str]:
    if ctx.dry_run:
        sized = [*TINY, "--device", "cpu", "--block-len", "32", "--body-len", "24", "--blocks", "200",
                 "--embed-blocks", "100", "--batch", "32", "--rounds", "1", "--processes", "1", "--peak-size", "128"]
    else:
        sized = [*BERT_BASE, "--device", "cuda", "--block-len", "288", "--body-len", "280", "--blocks", "8000",
                 "--embed-blocks", "2000", "--batch", "256", "--rounds", "3", "--processes", "1", "2",
                 "--peak-size", "8192"]  # fmt: skip
    return _module(ctx, "benchmarks.builder", "--precision", "bf16", "--compare=", *sized,
                   "--json", str(ctx.dir("builder") / "builder.json"))  # fmt: skip


def builder_figures(folder: Path) -> dict[str, Any]:
    result = _read_json(folder / "builder.json")
    embed = result["embed"]
    return {
        "processes": {p: {key: r[key] for key in ("build_blocks_per_s", "embed_blocks_per_s", "build_s")}
                      for p, r in result["builder"].items()},  # fmt: skip
        "speedup_2_over_1": result.get("speedup_build"),
        "embed_blocks_per_s": embed["embed_blocks_per_s"],
        "bare_blocks_per_s": embed["bare_blocks_per_s"],
        "embed_over_bare_median_round": embed["embed_over_bare"],
        "embed_over_bare_total": embed["embed_blocks_per_s"] / embed["bare_blocks_per_s"],
        "loader_blocks_per_s": embed.get("loader_blocks_per_s"),
        "bf16_peak_tflops": result["peak_flops_per_s"] / 1e12,
        "embed_mfu_bf16": result["embed_utilization"],
        "wikipedia_refresh_hours_8dev": result["wikipedia"]["hours_8dev_measured_util"],
    }


def search_command(ctx: Context) -> list[str]:
    sized = ["--rows", "20000", "--dim", "32", "--batches", "1", "8", "--rounds", "2", "--device", "cpu"]
    return _module(ctx, SEARCH, *(sized if ctx.dry_run else ["--device", "cuda"]),
                   "--json", str(ctx.dir("search") / "search.json"))  # fmt: skip


def demo_command(ctx: Context) -> list[str]:
    run = ["--kind", "demo", "--out", str(ctx.dir("demo") / "run"), "--json", str(ctx.dir("demo") / "figures.json")]
    if ctx.dry_run:  # note: tests/integration/cli/test_demo.py's size
        return _module(ctx, PIPELINE, *run, "--device", "cpu", "--bare-blocks", "100", "--rounds", "1",
                       "--", "--entities", "100", "--warmup-steps", "5", "--ict-steps", "10", "--steps", "6",
                       "--refresh.refresh_interval=2", "--refresh.swap_lag=1", "--train.log_interval=2",
                       "--train.save_interval=6", "--eval.max_examples=40", "--qa-steps", "4", "--qa-dev", "20")
    short = [] if ctx.full_pipelines else ["--warmup-steps", "400", "--ict-steps", "300"]
    return _module(ctx, PIPELINE, *run, "--", "--pretrain_config", "configs/pretrain/demo_gpu.yaml",
                   "--seed", "0", *short)  # fmt: skip


def demo_skip(ctx: Context) -> str | None:
    if ctx.dry_run and not ctx.pipelines_in_dry_run:
        return "dry run: the demo takes about 1.5 minutes on 2 CPU cores even at CI size (--pipelines runs it)"
    return None


def real_text_command(ctx: Context) -> list[str]:
    files = [f"--{key}={ctx.data / name}" for key, name in REAL_TEXT_FILES.items()]
    copy = '[{"words": 200, "steps": 200}, {"words": 0, "steps": 200}]'
    short = [] if ctx.full_pipelines else [
        f"--warm_start.copy_curriculum={copy}", "--warm_start.warmup_steps=400", "--warm_start.ict_steps=300",
        "--pretrain_steps=500", "--qa_steps=50"]  # fmt: skip
    # note: the rule tagger, as on every GPU run so far: spaCy is not installable on the GPU machine
    return _module(ctx, PIPELINE, "--kind", "real-text", "--out", str(ctx.dir("real_text") / "run"),
                   "--json", str(ctx.dir("real_text") / "figures.json"), "--", "--config", "configs/real_text/gpu.yaml",
                   "--tagging.kind=rule", *files, *short)  # fmt: skip


def real_text_skip(ctx: Context) -> str | None:
    if ctx.dry_run:
        return "dry run: the real-text pipeline takes many minutes on CPU even shortened"
    if "real_text" not in ctx.requested:
        return "about 5 minutes: a command of its own, --parts real_text (past the 8-minute check)"
    missing = [name for name in REAL_TEXT_FILES.values() if not (ctx.data / name).is_file()]
    if missing:
        prepare = "bash experiments/full_scale/gpu_check.sh --prepare"
        return f"{ctx.data}: missing {', '.join(missing)} ({prepare} copies them there)"
    return None


def pipeline_figures(folder: Path) -> dict[str, Any]:
    result = _read_json(folder / "figures.json")
    return {key: result[key] for key in ("trainer_wait_fraction", "builder_over_bare", "embed_alone_over_bare",
                                         "live_builds", "bare", "summary", "command")}  # fmt: skip


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


PARTS = [
    Part(name="step_bert_base", timeout_s=75, command=step_command("step_bert_base", [*BERT_BASE, "--batch", "8",
         "--block-len", "288", "--body-len", "256"], "8"), collect=step_figures),  # fmt: skip
    Part(name="step_demo", timeout_s=30, command=step_command("step_demo", [], "10"), collect=step_figures,
         skip=lambda ctx: "dry run: the same code path as step_bert_base" if ctx.dry_run else None),
    Part(name="builder", timeout_s=100, command=builder_command, collect=builder_figures),
    Part(name="search", timeout_s=40, command=search_command, collect=lambda folder: _read_json(folder / "search.json")),
    Part(name="demo", timeout_s=230, command=demo_command, collect=pipeline_figures, skip=demo_skip,
         dry_timeout_s=300, full_timeout_s=260),
    Part(name="real_text", timeout_s=330, command=real_text_command, collect=pipeline_figures, skip=real_text_skip,
         full_timeout_s=520),
    Part(name="tests", timeout_s=120, command=tests_command, collect=tests_figures),
]
"""Every part, in the order they run: the measurements first, the tests (pass or fail) last."""
