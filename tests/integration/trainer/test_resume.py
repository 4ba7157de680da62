"""Resume rules of the run directory, each case made to happen rather than waited for (no kill timing): a run resumed
from a checkpoint saved between two refreshes searches the index the uninterrupted run searched, after the builder
has already built past it; every log the run appends holds each record once; a corrupt newest checkpoint is set
aside so its step can be saved again; a rerun of a finished run logs its final evaluation once."""

import json

import pytest

from realm.core.logging import read_metrics
from realm.run.layout import retriever_dir
from realm.run.publication import list_published, verify_published
from tests.helpers import run_module

pytestmark = pytest.mark.slow

def _records(run):
    """Every metrics record without its timing fields (which differ between runs), in file order."""
    return [
        {k: v for k, v in r.items() if not k.startswith("time/")} for r in read_metrics(run / "metrics.jsonl")
    ]


def _retrievals(run):
    return [json.loads(line) for line in (run / "retrievals.jsonl").read_text().splitlines()]


def _assert_same_run(run, straight_run):
    expected, found = _records(straight_run), _records(run)
    assert [(r["step"], sorted(r)) for r in found] == [(r["step"], sorted(r)) for r in expected]  # nothing twice
    for a, b in zip(expected, found):
        for key, value in a.items():
            assert b[key] == pytest.approx(value, rel=1e-5, abs=1e-6), (a["step"], key)
    assert _retrievals(run) == _retrievals(straight_run)


def test_a_resume_between_refreshes_searches_the_same_index_and_logs_each_record_once(straight, tmp_path):
    common, straight_run = straight
    run = tmp_path / "run"
    run_module("realm.trainer.pretrain", *common, f"--train.run_dir={run}")
    # the builder built v4 and v6 and would have removed export 2; checkpoint 3 searched v2 and pins it
    assert 2 in [step for step, _ in list_published(retriever_dir(run), "step-")]
    checkpoint = run / "checkpoints" / "step-00000003"
    run_module("realm.trainer.pretrain", *common, f"--train.run_dir={run}", f"--train.resume={checkpoint}")
    _assert_same_run(run, straight_run)
    for step in (4, 5, 6):  # the later checkpoints of the first invocation are set aside, their steps saved again
        assert (run / "checkpoints" / f"step-0000000{step}.superseded").is_dir()
        verify_published(run / "checkpoints" / f"step-0000000{step}")

    # a rerun of the finished run resumes at its last step and evaluates again: the record replaces the first one
    run_module("realm.trainer.pretrain", *common, f"--train.run_dir={run}")
    _assert_same_run(run, straight_run)


def test_a_corrupt_newest_checkpoint_is_set_aside_and_its_step_saved_again(straight, tmp_path):
    common, straight_run = straight
    run = tmp_path / "run"
    run_module("realm.trainer.pretrain", *common, f"--train.run_dir={run}")
    weights = run / "checkpoints" / "step-00000006" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))

    proc = run_module("realm.trainer.pretrain", *common, f"--train.run_dir={run}")
    assert "fails verification" in proc.stderr and "step-00000006.failed-verification" in proc.stderr
    assert (run / "checkpoints" / "step-00000006.failed-verification" / "model.safetensors").read_bytes() == data
    verify_published(run / "checkpoints" / "step-00000006")
    _assert_same_run(run, straight_run)
