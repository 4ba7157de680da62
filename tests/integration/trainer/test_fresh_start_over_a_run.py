"""``train.resume=never`` on a run directory that already holds a finished run starts afresh: the old checkpoints
are set aside as ``.superseded`` (not overwritten: that was a ``FileExistsError`` traceback at the first save), its
exports and index versions are discarded, and the new run logs what an uninterrupted fresh run logs."""

import pytest

from realm.core.logging import read_metrics
from realm.run.layout import checkpoints_dir
from tests.helpers import run_module
from tests.integration.trainer.conftest import per_step

pytestmark = pytest.mark.slow


def test_resume_never_over_a_finished_run_starts_afresh_and_keeps_the_old_checkpoints_aside(straight, tmp_path):
    common, straight_run = straight
    run = tmp_path / "run"
    run_module("realm.trainer.pretrain", *common, f"--train.run_dir={run}", "--train.max_steps=4")
    run_module("realm.trainer.pretrain", *common, f"--train.run_dir={run}", "--train.resume=never")
    for key in ("index/version", "train/loss"):
        expected, found = per_step(straight_run, key), per_step(run, key)
        assert sorted(found) == sorted(expected), key
        assert [(s, found[s]) for s in found if found[s] != pytest.approx(expected[s], rel=1e-5, abs=1e-6)] == [], key
    steps = [r["step"] for r in read_metrics(run / "metrics.jsonl") if "train/loss" in r]
    assert steps == sorted(set(steps)), "a step was logged twice"
    aside = sorted(p.name for p in checkpoints_dir(run).iterdir() if p.name.endswith(".superseded"))
    assert aside == [f"step-{s:08d}.superseded" for s in range(1, 5)]
