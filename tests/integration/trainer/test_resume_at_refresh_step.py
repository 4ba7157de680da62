"""A resume from a checkpoint saved at a refresh step is exact whatever the builder did after it: the export of that
step is what the next steps wait for (the index is stale by more than max_staleness), so the checkpoint pins it, and
the builder keeps it (and its index version) even after it has built newer ones and pruned the rest."""

import pytest

from realm.core.logging import read_metrics
from realm.run.layout import checkpoints_dir, index_dir
from realm.run.publication import remove_folder
from tests.helpers import run_module
from tests.integration.trainer.conftest import per_step

pytestmark = pytest.mark.slow


def test_a_resume_at_a_refresh_step_trains_the_next_steps_on_that_steps_export(straight, tmp_path):
    common, straight_run = straight
    run = tmp_path / "run"
    every4 = "--train.save_interval=4"
    # checkpoint 4 is saved right after export 4, while the trainer still searches v2; step 5 trains on v4
    run_module("realm.trainer.pretrain", *common, f"--train.run_dir={run}", every4)
    remove_folder(checkpoints_dir(run) / "step-00000006")  # as if the run was killed before it saved step 6
    # the builder of the killed run builds v6 (again, if it was done before the run ended), then prunes what no
    # checkpoint pins: older exports, and index versions past keep_versions (1 here)
    remove_folder(index_dir(run) / "v-00000006")
    run_module("realm.index_builder.watch", "--config", "configs/index/tiny.yaml", f"--run_dir={run}", "--once=true",
               "--keep_versions=1")  # fmt: skip
    run_module("realm.trainer.pretrain", *common, f"--train.run_dir={run}", every4)  # resumes from checkpoint 4
    for key in ("index/version", "train/loss"):
        expected, found = per_step(straight_run, key), per_step(run, key)
        assert sorted(found) == sorted(expected) == list(range(1, 7)), key
        assert [(s, found[s]) for s in found if found[s] != pytest.approx(expected[s], rel=1e-5, abs=1e-6)] == [], key
    steps = [r["step"] for r in read_metrics(run / "metrics.jsonl") if "train/loss" in r]
    assert steps == sorted(set(steps)), "a step was logged twice"
