"""``experiments/demo/demo_grid.py`` (issue 56): which bars a run misses, and the grid's order (runs wider than a core's
share first and alone, the narrow ones side by side), on stand-in runs that write a summary instead of training."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from experiments.demo import demo_grid as grid


GOOD = {"heldout_accuracy_retrieval": 0.80, "heldout_accuracy_closed_book": 0.0, "gold_recall_at_k_start": 0.70,
        "gold_recall_at_k_end": 0.95, "qa_exact_match_end": 0.90, "wall_seconds": 1.0}  # fmt: skip


def test_a_run_misses_each_bar_it_is_below_and_a_recall_that_does_not_rise():
    assert grid.misses(GOOD) == []
    low = GOOD | {"heldout_accuracy_retrieval": 0.64, "qa_exact_match_end": 0.79}
    assert grid.misses(low) == ["heldout_accuracy_retrieval", "qa_exact_match_end"]
    assert grid.misses(GOOD | {"gold_recall_at_k_start": 0.95}) == ["recall did not rise"]
    assert grid.misses(GOOD | {"gold_recall_at_k_end": 0.89, "gold_recall_at_k_start": 0.5}) == ["gold_recall_at_k_end"]


def test_wide_runs_go_alone_first_then_narrow_ones_side_by_side_and_finished_runs_are_read(tmp_path, monkeypatch):
    calls = []
    lock, side_by_side = threading.Lock(), threading.Barrier(2)

    def fake_run_realm(argv, log, threads=None):
        out = Path(next(a for a in argv if a.startswith("--out=")).removeprefix("--out="))
        with lock:
            calls.append((out.name, threads))
        if threads == 1:
            side_by_side.wait(timeout=60)  # note: breaks (and fails the test) unless the two narrow runs overlap
        seed = int(out.name.rsplit("-s", 1)[1])
        out.mkdir(parents=True)
        (out / "summary.json").write_text(json.dumps(GOOD | {"heldout_accuracy_retrieval": 0.6 + seed / 10}))
        return "realm demo"

    monkeypatch.setattr(grid, "run_realm", fake_run_realm)
    monkeypatch.setattr(grid.os, "cpu_count", lambda: 2)
    done = tmp_path / "grid" / "bf16-t1-s0"
    done.mkdir(parents=True)
    (done / "summary.json").write_text(json.dumps(GOOD))
    out_json = tmp_path / "grid.json"
    grid.main(["--seeds", "0", "1", "2", "--threads", "1", "2", "--jobs", "2", "--out", str(tmp_path / "grid"),
               "--json", str(out_json)])  # fmt: skip
    assert [name for name, _ in calls[:3]] == ["bf16-t2-s0", "bf16-t2-s1", "bf16-t2-s2"]  # wide ones first
    assert sorted(name for name, _ in calls[3:]) == ["bf16-t1-s1", "bf16-t1-s2"]  # s0 was read, not re-run
    assert all(threads == int(name.split("-t")[1][0]) for name, threads in calls)
    result = json.loads(out_json.read_text())
    assert [r["run"] for r in result["rows"]] == [f"bf16-t{t}-s{s}" for t in (1, 2) for s in (0, 1, 2)]
    assert result["all_meet_bars"] is False  # seed 0 at 2 threads: held-out 0.60 < 0.65
    assert result["rows"][3]["misses"] == ["heldout_accuracy_retrieval"]


def test_flags_the_grid_does_not_know_reach_every_run_after_the_scales_own(tmp_path, monkeypatch):
    argvs = []

    def fake_run_realm(argv, log, threads=None):
        argvs.append(argv)
        out = Path(next(a for a in argv if a.startswith("--out=")).removeprefix("--out="))
        out.mkdir(parents=True)
        (out / "summary.json").write_text(json.dumps(GOOD))
        return "realm demo"

    monkeypatch.setattr(grid, "run_realm", fake_run_realm)
    recipe = ["--retriever.center_queries=true", "--qa_steps=200"]
    grid.main(["--seeds", "0", "1", "--precisions", "fp32", "--scale", "ci", "--out", str(tmp_path), *recipe])
    assert len(argvs) == 2
    assert all(argv[-2:] == recipe and argv[-2 - len(grid.SCALES["ci"]):-2] == grid.SCALES["ci"] for argv in argvs)
