"""A pre-training run that diverges (a learning rate of 1e30 from the first step: the loss of step 2 is NaN) stops in
one line naming the step, exit code 2, before the retriever export and the checkpoint of that step: nothing is
exported, saved or indexed from the step whose loss was not finite."""

import subprocess
import sys

import pytest

from realm.run.layout import checkpoints_dir, index_dir, retriever_dir
from realm.run.publication import list_published
from tests.helpers import ROOT, data_overrides, subprocess_env
from tests.integration.trainer.conftest import TINY

pytestmark = pytest.mark.slow


def test_a_diverged_pretraining_run_stops_in_one_line_before_it_exports_or_saves(tiny_world, tmp_path):
    run = tmp_path / "run"
    args = ["--config", TINY, "--train.save_interval=1", *data_overrides(tiny_world), f"--train.run_dir={run}",
            "--optim.lr=1e30", "--optim.warmup_steps=0"]  # fmt: skip
    proc = subprocess.run([sys.executable, "-m", "realm.trainer.pretrain", *args], cwd=ROOT, env=subprocess_env(),
                          capture_output=True, text=True, timeout=180)  # fmt: skip
    errors = [line for line in proc.stderr.splitlines() if line.startswith("realm train:")]
    assert proc.returncode == 2 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "non-finite" in errors[0] and "step 2" in errors[0] and "optim.lr" in errors[0], errors[0]
    assert [step for step, _ in list_published(retriever_dir(run), "step-")] == [0]  # the initial export only
    # note: save_interval 1: the weights of step 1 are huge but finite, and so is its loss
    assert [step for step, _ in list_published(checkpoints_dir(run), "step-")] == [1]
    assert [step for step, _ in list_published(index_dir(run), "v-")] in ([], [0])
