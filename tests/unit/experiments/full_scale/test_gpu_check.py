"""``experiments/full_scale/gpu_check.py``: each part runs as its own process group under its own limit, a part that
overruns is recorded as ``timeout`` (its processes stopped) and the check goes on, and the JSON has one schema for every
part; the search part's dry run and the markdown table made from the JSON."""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from pathlib import Path

from experiments.full_scale import gpu_check
from experiments.full_scale import gpu_check_parts as parts


RECORD_KEYS = {"status", "seconds", "limit_s", "command", "log", "reason", "figures"}
MACHINE = {"gpu": None, "torch": "test", "cuda": None}


def _python_part(name: str, code: str, timeout_s: float, collect=lambda folder: {}) -> object:
    return parts.Part(name=name, timeout_s=timeout_s, dry_timeout_s=timeout_s, collect=collect,
                      command=lambda ctx: [sys.executable, "-c", code, str(ctx.dir(name))])  # fmt: skip


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_part_over_its_limit_is_a_timeout_its_processes_stopped_and_the_next_parts_run(tmp_path):
    # the slow part starts a child (as torchrun or the pipelines' builder do), records its pid, and sleeps
    slow = ("import subprocess, sys, time, pathlib; child = subprocess.Popen([sys.executable, '-c', "
            "'import time; time.sleep(60)']); pathlib.Path(sys.argv[1], 'child').write_text(str(child.pid)); "
            "print('started', flush=True); time.sleep(60)")  # fmt: skip
    fails = "import sys; print('boom: the part broke'); sys.exit(3)"
    good = "import json, sys, pathlib; pathlib.Path(sys.argv[1], 'f.json').write_text(json.dumps({'qps': 5.0}))"
    checks = [
        _python_part("slow", slow, 2.0),
        _python_part("fails", fails, 30.0),
        _python_part("good", good, 30.0, collect=lambda folder: json.loads((folder / "f.json").read_text())),
        parts.Part(name="skipped", timeout_s=30.0, command=lambda ctx: ["false"], collect=lambda folder: {},
                   skip=lambda ctx: "not on this machine"),
    ]  # fmt: skip
    ctx = parts.Context(out=tmp_path / "work", dry_run=True)
    started = time.perf_counter()
    result = gpu_check.run_check(checks, ctx, 60.0, tmp_path / "out" / "gpu_check.json", machine=MACHINE)
    assert time.perf_counter() - started < 20  # note: the 60 s sleeps were cut at the slow part's 2 s limit
    records = result["parts"]
    assert [records[name]["status"] for name in ("slow", "fails", "good", "skipped")] == [
        "timeout", "failed", "ok", "skipped"]  # fmt: skip
    assert all(set(record) >= RECORD_KEYS for record in records.values())
    assert all(record["status"] in gpu_check.STATUSES for record in records.values())
    assert 2.0 <= records["slow"]["seconds"] < 15 and "limit of 2 s" in records["slow"]["reason"]
    assert records["slow"]["log_tail"] == ["started"]
    child = int((ctx.dir("slow") / "child").read_text())
    for _ in range(50):  # note: the group was sent TERM; give the child a moment to go
        if not _alive(child):
            break
        time.sleep(0.1)
    assert not _alive(child), "the timed-out part's child process is still running"
    assert records["fails"]["reason"] == "exit code 3" and "boom: the part broke" in records["fails"]["log_tail"]
    assert records["good"]["figures"] == {"qps": 5.0} and records["good"]["reason"] is None
    assert records["skipped"]["reason"] == "not on this machine" and records["skipped"]["figures"] == {}
    # the file on disk is what was returned, the machine included
    assert json.loads((tmp_path / "out" / "gpu_check.json").read_text()) == json.loads(json.dumps(result))
    assert result["machine"] == MACHINE and result["schema"] == gpu_check.SCHEMA and result["dry_run"] is True


def test_parts_after_the_budget_is_spent_are_skipped_with_the_reason(tmp_path):
    checks = [_python_part("a", "print(1)", 30.0), _python_part("b", "print(2)", 30.0)]
    ctx = parts.Context(out=tmp_path, dry_run=True)
    result = gpu_check.run_check(checks, ctx, 1.0, tmp_path / "gpu_check.json", machine=MACHINE)
    for record in result["parts"].values():
        assert record["status"] == "skipped" and "budget of 1 s was spent" in record["reason"]


def test_dry_run_of_the_search_part_measures_the_machine_and_writes_figures_and_the_table(tmp_path):
    ctx = parts.Context(out=tmp_path / "work", dry_run=True)
    result = gpu_check.run_check(gpu_check.select(["search"]), ctx, 120.0, tmp_path / "gpu_check.json")
    machine = result["machine"]
    assert machine["torch"] and machine["bf16_mm_peak_tflops"] > 0 and machine["versions"]["transformers"]
    record = result["parts"]["search"]
    assert record["status"] == "ok", record
    figures = record["figures"]
    assert figures["rows"] == 20000 and figures["dtype"] == "fp16" and set(figures["batches"]) == {"1", "8"}
    # the fp16 index finds what the fp32 reference finds, and each query's own row first
    assert figures["recall_at_k_vs_exact_fp32"] > 0.95 and figures["own_row_first"] == 1.0
    assert all(batch["qps"] > 0 for batch in figures["batches"].values())
    table = importlib.import_module("experiments.full_scale.gpu_check_table").markdown([result])
    assert "| search | ok |" in table and "Exact `TorchIndex` search, 20,000 x 32 fp16" in table


def test_table_reads_each_part_from_the_last_file_that_ran_it():
    def check(parts_: dict) -> dict:
        return {"dry_run": False, "budget_s": 480, "wall_s": 100, "started": "t", "machine": {"gpu": "H200"},
                "parts": parts_}  # fmt: skip

    def record(status: str, figures: dict) -> dict:
        return {"status": status, "seconds": 10.0, "limit_s": 135.0, "command": "c", "log": "l", "reason": None,
                "figures": figures}  # fmt: skip

    demo = {"trainer_wait_fraction": 0.04, "builder_over_bare": 0.91, "embed_alone_over_bare": 0.97,
            "summary": {"wall_seconds": 120.0, "heldout_accuracy_retrieval": 0.9, "heldout_accuracy_closed_book":
                        0.01, "qa_exact_match_end": 0.85}}  # fmt: skip
    first = check({"demo": record("timeout", {}), "search": record("skipped", {})})
    second = check({"demo": record("ok", demo), "search": record("skipped", {})})
    table = importlib.import_module("experiments.full_scale.gpu_check_table").markdown([first, second])
    assert "| demo | ok | 10 (135) |" in table and "| search | skipped |" in table
    assert "| demo | 120 s | 4.0% | 91.0% | 97.0% | 0.900 (0.010) | 0.850 |" in table


def test_gpu_test_files_are_the_ones_that_touch_cuda_and_not_this_one():
    files = parts.gpu_test_files()
    assert "tests/unit/index/test_torch_search.py" in files
    assert all("cuda" in Path(parts.REPO / f).read_text() for f in files)
    assert not any(f.endswith("test_gpu_check.py") for f in files)


def test_live_builds_leave_out_the_first_index_built_before_training(tmp_path):
    pipeline = importlib.import_module("experiments.full_scale.gpu_check_pipeline")
    for step, vectors, seconds in ((0, 1000, 1.0), (100, 1000, 2.0), (200, 1000, 4.0)):
        folder = tmp_path / "index" / f"v-{step:08d}"
        folder.mkdir(parents=True)
        manifest = {"num_vectors": vectors, "build_seconds": seconds, "embed_precision": "bf16"}
        (folder / "manifest.json").write_text(json.dumps(manifest))
    builds = pipeline.live_builds(tmp_path)
    # v0 (1,000 blocks/s, the GPU to itself) is left out: 500 and 250 blocks/s while the trainer ran
    assert (builds["versions"], builds["live_versions"], builds["precision"]) == (3, 2, "bf16")
    assert builds["build_blocks_per_s_median"] == 375.0 and abs(builds["build_blocks_per_s_total"] - 2000 / 6) < 1e-9
    for step in (100, 200):
        (tmp_path / "index" / f"v-{step:08d}" / "manifest.json").unlink()
    assert pipeline.live_builds(tmp_path)["build_blocks_per_s_total"] == 1000.0  # only one: that one


def test_the_real_text_pipeline_runs_only_when_named_and_the_8_minute_check_leaves_it_out(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for name in parts.REAL_TEXT_FILES.values():
        (data / name).write_text("{}")
    real_text = next(part for part in parts.PARTS if part.name == "real_text")
    default = parts.Context(out=tmp_path, data=data, requested=())
    assert "--parts real_text" in real_text.skip(default)
    named = parts.Context(out=tmp_path, data=data, requested=("real_text",))
    assert real_text.skip(named) is None
    # the parts the plain command runs keep their expected times (the first H200 check's) inside the budget
    expected = {"step_bert_base": 45, "step_demo": 16, "builder": 79, "search": 17, "demo": 200, "tests": 85}
    assert sum(expected.values()) < gpu_check.BUDGET_S
    assert all(part.timeout_s > expected[part.name] for part in parts.PARTS if part.name in expected)
