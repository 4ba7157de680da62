"""metrics.jsonl survives kills: a torn last line is cut (not glued to the next record), and a resumed run drops what
the killed run logged past its checkpoint, so no step is recorded twice."""

import json
import logging

from realm.core.logging import MetricsLogger, read_metrics


def test_a_torn_last_line_is_cut_with_a_warning_and_the_next_record_stays_whole(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "train/loss": 2.0}\n{"step": 2, "train/lo')
    with caplog.at_level(logging.WARNING):
        log = MetricsLogger(path)
    assert "torn last line" in caplog.text
    log.log({"train/loss": 1.5}, 2)
    log.close()
    assert [json.loads(line) for line in path.read_text().splitlines()] == [
        {"step": 1, "train/loss": 2.0},
        {"step": 2, "train/loss": 1.5},
    ]


def test_resuming_drops_the_records_past_the_checkpoint(tmp_path):
    path = tmp_path / "metrics.jsonl"
    log = MetricsLogger(path)
    for step in range(1, 6):
        log.log({"train/loss": float(step)}, step)
    assert log.drop_after(3) == 2
    for step in (4, 5):
        log.log({"train/loss": 10.0 + step}, step)
    log.close()
    records = read_metrics(path)
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5]
    assert [r["train/loss"] for r in records] == [1.0, 2.0, 3.0, 14.0, 15.0]


def test_nothing_to_drop_leaves_the_file_alone(tmp_path):
    path = tmp_path / "metrics.jsonl"
    log = MetricsLogger(path)
    log.log({"x": 1}, 1)
    before = path.stat().st_mtime_ns
    assert log.drop_after(1) == 0 and path.stat().st_mtime_ns == before
    log.close()
