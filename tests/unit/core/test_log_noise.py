"""A first run a person can read (issue 59 item 3): expected third-party events are quiet unless --verbose, the
others still show; pipeline stages are numbered with their lengths; the closing lines name outputs and next
commands."""

from __future__ import annotations

import logging

import pytest

from realm.cli.summary_table import closing_lines
from realm.core.log_noise import VERBOSE_ENV, ExpectedNoiseFilter, is_expected_noise, set_verbose
from realm.pipeline.stages import StageBanners, announce_stage

REPORT = """\x1b[1mEmbedder LOAD REPORT\x1b[0m from: runs/demo/warmup/encoder
Key                                        | Status     |
-------------------------------------------+------------+-
cls.predictions.bias                       | UNEXPECTED |
projection.bias                            | MISSING    |
projection.weight                          | MISSING    |
"""


def _record(name: str, level: int, message: str) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, message, None, None)


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    monkeypatch.delenv(VERBOSE_ENV, raising=False)


def test_expected_events_are_noise():
    assert is_expected_noise(_record("accelerate.checkpointing", logging.INFO, "Model weights saved in x"))
    assert is_expected_noise(_record("accelerate.utils.other", logging.WARNING,
                                     "Removed shared tensor {'mlm.cls.predictions.decoder.weight'} while saving."))
    assert is_expected_noise(_record("transformers.modeling_utils", logging.WARNING, REPORT))
    assert is_expected_noise(_record("transformers.distributed", logging.WARNING, "The following layers were not "
                                     "sharded: bert.encoder.layer.*.attention.self.key.bias"))  # fmt: skip


def test_unexpected_events_still_show():
    # a missing encoder weight is a fault, not the projection's fresh init
    broken = REPORT + "bert.encoder.layer.0.attention.self.query.weight | MISSING    |\n"
    assert not is_expected_noise(_record("transformers.modeling_utils", logging.WARNING, broken))
    assert not is_expected_noise(_record("accelerate.accelerator", logging.WARNING, "Gradient accumulation off"))
    assert not is_expected_noise(_record("realm.trainer", logging.INFO, "Removed shared tensor"))


def test_verbose_lets_everything_through():
    record = _record("accelerate.checkpointing", logging.INFO, "Model weights saved in x")
    assert not ExpectedNoiseFilter().filter(record)
    set_verbose(True)
    try:
        assert ExpectedNoiseFilter().filter(record)
    finally:
        set_verbose(False)


def test_stages_are_numbered_with_their_lengths(caplog):
    caplog.set_level(logging.INFO, logger="realm.pipeline.stages")
    with StageBanners(3):
        announce_stage("data", "a world of 2,000 entities", "runs/demo")
        announce_stage("reader warm-up", None, "runs/demo/warmup")
        announce_stage("ICT warm start", 1000, "runs/demo/ict")
    announce_stage("QA fine-tuning", 250, "runs/qa")  # outside a pipeline: not numbered
    assert caplog.messages == ["[1/3] data: a world of 2,000 entities -> runs/demo", "[2/3] reader warm-up: skipped",
                               "[3/3] ICT warm start: 1,000 steps -> runs/demo/ict",
                               "QA fine-tuning: 250 steps -> runs/qa"]  # fmt: skip


def test_closing_lines_name_the_outputs_the_run_wrote_and_the_next_commands(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "summary.json").write_text("{}")
    text = closing_lines(tmp_path)
    assert f"model    {tmp_path / 'model'}" in text and f"summary  {tmp_path / 'summary.json'}" in text
    assert "QA model" not in text  # no qa/model: the run stopped before QA
    for command in (f"realm report {tmp_path}", f'realm inspect {tmp_path} "QUERY"', f"realm export {tmp_path} OUT"):
        assert command in text


def test_eta_counts_from_the_step_a_job_began_at_its_pace_in_this_invocation(monkeypatch):
    import time

    from realm.core.logging import eta

    monkeypatch.setattr(time, "perf_counter", lambda: 1000.0)
    assert eta(110, 1600, (1000.0 - 20.0, 100)) == "ETA 49m40s"  # 10 steps in 20 s, 1,490 left
    assert eta(1100, 1600, (1000.0 - 3600.0, 100)) == "ETA 30m00s"
    assert eta(200, 100000, (1000.0 - 100.0, 100)) == "ETA 27h43m"  # 99,800 s
    assert eta(99, 100, (1000.0 - 5.0, 98)) == "ETA 5s"
    assert eta(100, 1600, (990.0, 100)) == "" and eta(1600, 1600, (0.0, 0)) == ""  # none before a step here, or at the end
