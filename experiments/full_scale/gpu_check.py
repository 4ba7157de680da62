"""The GPU check (issue 58): every GPU figure of ``docs/performance.md`` in one command of at most 8 minutes on one
H100/H200, written to one JSON that the table is made from.

Each part (``experiments/full_scale/gpu_check_parts.py``: the GPU-touching tests, the trainer step at BERT-base and demo
shapes, the builder at BERT-base, exact ``TorchIndex`` search at 13.35M x 128 fp16, the GPU demo; the real-text GPU
config, about 5 minutes, only when ``--parts`` names it) runs as its own process group with its own time limit, its
output in ``OUT/NAME.log``; one that fails or overruns is recorded as ``failed`` or ``timeout`` (its process group
killed) and the next one runs; no part is given more than the budget has left. The JSON (``--json``, default
``OUT/gpu_check.json``) is rewritten after every part, so a check stopped from outside keeps what it had: the machine
(GPU, torch, CUDA, library versions, the bf16 ``torch.mm`` peak), then per part its status (ok, failed, timeout,
skipped), seconds, limit, command, reason and figures (and the end of its log when it did not succeed). Run from the
repository root (``experiments/full_scale/gpu_check.sh`` sets up the GPU machine first)::

    python -m experiments.full_scale.gpu_check [--out runs/gpu_check] [--parts search demo] [--budget 480]
    python -m experiments.full_scale.gpu_check --dry-run     # CPU, every shape shrunk, the same code paths (~1.5 min)
    python -m experiments.full_scale.gpu_check --table runs/gpu_check/gpu_check.json   # docs/performance.md's rows
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks.harness import REPO  # isort:skip  (first: no hub, no W&B)
from experiments.full_scale.gpu_check_parts import PARTS, Context, Part
from experiments.full_scale.gpu_check_table import markdown

from realm.core.atomic import write_text_atomic

SCHEMA = 1
STATUSES = ("ok", "failed", "timeout", "skipped")
BUDGET_S = 480.0
"""Issue 58: at most 8 minutes on one H100/H200."""
DESCRIBE_TIMEOUT_S = 40.0
MIN_PART_S = 5.0
"""With less than this left of the budget, the parts still to run are skipped instead."""
LOG_TAIL_LINES = 15
PACKAGES = ("torch", "transformers", "accelerate", "datasets", "faiss-cpu", "numpy", "tokenizers", "realm-pretrain")


def describe(dry_run: bool) -> dict[str, Any]:
    """The machine: GPU, torch and CUDA, library versions, CPU count and the bf16 ``torch.mm`` peak (8192^3 on a GPU,
    256^3 in a dry run). Run in a process of its own (``--describe``), so the check's own process never holds a CUDA
    context while the parts run."""
    import torch
    from benchmarks.flops import matmul_peak

    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    cuda = torch.cuda.is_available() and not dry_run
    device = torch.device("cuda" if cuda else "cpu")
    props = torch.cuda.get_device_properties(0) if cuda else None
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False)
    return {
        "gpu": props.name if props else None,
        "gpu_count": torch.cuda.device_count() if cuda else 0,
        "gpu_memory_gb": props.total_memory / 1e9 if props else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "host": platform.node(),
        "versions": versions,
        "commit": commit.stdout.strip() or None,
        "bf16_mm_peak_tflops": matmul_peak(torch.bfloat16, 256 if dry_run else 8192, device) / 1e12,
    }


def _kill_group(proc: subprocess.Popen) -> None:
    """Stops the part's whole process group (torchrun ranks, the pipelines' builders): TERM, then KILL."""
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(grace)
            return
        except subprocess.TimeoutExpired:
            continue


def run_part(part: Part, ctx: Context, limit_s: float) -> dict[str, Any]:
    """Runs one part in its own process group under ``limit_s``; its record (status, seconds, figures, ...)."""
    folder = ctx.dir(part.name)
    # note: emptied first, so a part that dies is never credited with an earlier check's files (nor resumes its run)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    argv = part.command(ctx)
    log = ctx.out / f"{part.name}.log"
    record: dict[str, Any] = {"status": "ok", "seconds": 0.0, "limit_s": round(limit_s, 1),
                              "command": shlex.join(argv), "log": log.name, "reason": None, "figures": {}}  # fmt: skip
    print(f"[gpu_check] {part.name} (limit {limit_s:.0f} s): {record['command']}", flush=True)
    started = time.perf_counter()
    with log.open("w", encoding="utf-8") as out:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(limit_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            code = None
    record["seconds"] = round(time.perf_counter() - started, 1)
    if code is None:
        record.update(status="timeout", reason=f"stopped after its limit of {limit_s:.0f} s")
    elif code != 0:
        record.update(status="failed", reason=f"exit code {code}")
    try:
        record["figures"] = part.collect(folder)
    except Exception as err:  # noqa: BLE001  (a part's output of any shape must not stop the check)
        if record["status"] == "ok":
            record.update(status="failed", reason=f"its figures could not be read: {type(err).__name__}: {err}")
    if record["status"] != "ok":
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
        record["log_tail"] = lines[-LOG_TAIL_LINES:]
    print(f"[gpu_check] {part.name}: {record['status']} in {record['seconds']} s"
          + (f" ({record['reason']})" if record["reason"] else ""), flush=True)  # fmt: skip
    return record


def run_check(parts: list[Part], ctx: Context, budget_s: float, json_path: Path,
              machine: dict[str, Any] | None = None) -> dict:  # fmt: skip
    """Every part in order within ``budget_s`` (each at most its own limit in ``ctx``: ``Part.limit``);
    writes the check's JSON to ``json_path`` after each part and returns it. ``machine``: given (tests), else
    measured by ``--describe``."""
    ctx.out.mkdir(parents=True, exist_ok=True)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.perf_counter() + budget_s
    result: dict[str, Any] = {"schema": SCHEMA, "dry_run": ctx.dry_run, "budget_s": budget_s,
                              "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "wall_s": 0.0,
                              "machine": machine, "parts": {}}  # fmt: skip
    started = time.perf_counter()
    if machine is None:
        result["machine"] = _describe_in_process(ctx)
    for part in parts:
        reason = part.skip(ctx)
        left = deadline - time.perf_counter()
        limit = min(part.limit(ctx), left)
        if reason is None and left < MIN_PART_S:
            reason = f"the check's budget of {budget_s:.0f} s was spent ({left:.0f} s left)"
        if reason is not None:
            print(f"[gpu_check] {part.name}: skipped ({reason})", flush=True)
            result["parts"][part.name] = {"status": "skipped", "seconds": 0.0, "limit_s": 0.0, "command": None,
                                          "log": None, "reason": reason, "figures": {}}  # fmt: skip
        else:
            result["parts"][part.name] = run_part(part, ctx, limit)
        result["wall_s"] = round(time.perf_counter() - started, 1)
        _write(json_path, result)
    _write(json_path, result)
    return result


def _describe_in_process(ctx: Context) -> dict[str, Any]:
    path = ctx.out / "machine.json"
    argv = [ctx.python, "-m", "experiments.full_scale.gpu_check", "--describe", str(path),
            *(["--dry-run"] * ctx.dry_run)]  # fmt: skip
    try:
        subprocess.run(argv, cwd=REPO, timeout=DESCRIBE_TIMEOUT_S, check=True, capture_output=True, text=True)
        return json.loads(path.read_text(encoding="utf-8"))
    except (subprocess.SubprocessError, OSError, ValueError) as err:
        stderr = getattr(err, "stderr", None) or ""
        return {"error": f"{type(err).__name__}: {err} {stderr[-500:]}".strip()}


def _write(path: Path, result: dict) -> None:
    write_text_atomic(path, json.dumps(result, indent=2, default=str) + "\n")


def select(names: list[str] | None) -> list[Part]:
    """The parts named (all of them, in order, without names); an unknown name is an error naming the known ones."""
    if not names:
        return list(PARTS)
    known = {part.name: part for part in PARTS}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise SystemExit(f"--parts: unknown {', '.join(unknown)}; known: {', '.join(known)}")
    return [part for part in PARTS if part.name in names]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="runs/gpu_check", help="the parts' folders and logs (default runs/gpu_check)")
    p.add_argument("--json", default=None, help="where the check's JSON goes (default OUT/gpu_check.json)")
    names = ", ".join(part.name for part in PARTS)
    p.add_argument("--parts", nargs="+", default=None, help=f"a subset (run in the check's order: {names})")
    p.add_argument("--budget", type=float, default=BUDGET_S, help="seconds for all parts together (default 480)")
    p.add_argument("--dry-run", action="store_true", help="CPU, every shape shrunk, the same code paths")
    p.add_argument("--pipelines", action="store_true", help="dry run: also the demo at CI size (about 1.5 min)")
    p.add_argument("--full-pipelines", action="store_true",
                   help="every pipeline stage at its config's length: one pipeline a command, --parts demo (or "
                        "real_text) --budget 520")
    p.add_argument("--data", default=str(REPO / ".gpu_check" / "data"), help="the real-text data files' folder")
    p.add_argument("--table", metavar="JSON", nargs="+", help="print docs/performance.md's rows from check JSONs")
    p.add_argument("--describe", metavar="PATH", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.describe:
        _write(Path(args.describe), describe(args.dry_run))
        return 0
    if args.table:
        print(markdown([json.loads(Path(path).read_text(encoding="utf-8")) for path in args.table]))
        return 0
    ctx = Context(out=Path(args.out).resolve(), dry_run=args.dry_run, pipelines_in_dry_run=args.pipelines,
                  full_pipelines=args.full_pipelines, requested=tuple(args.parts or ()),
                  data=Path(args.data).resolve())  # fmt: skip
    json_path = Path(args.json).resolve() if args.json else ctx.out / "gpu_check.json"
    result = run_check(select(args.parts), ctx, args.budget, json_path)
    print(markdown([result]))
    print(f"[gpu_check] {json_path}: " + ", ".join(
        f"{name} {record['status']}" for name, record in result["parts"].items()))  # fmt: skip
    return 0 if all(record["status"] in ("ok", "skipped") for record in result["parts"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
