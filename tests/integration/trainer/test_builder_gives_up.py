"""``realm train`` with its child builder on a run whose index folder is on a full disk: the builder refuses to map
the embeddings (no SIGBUS), retries, gives up with its reason recorded, and the trainer, waiting for its first index,
stops within seconds (not at ``initial_index_timeout_s``) with one line carrying that reason, exit code 2. The full
disk is simulated in every process of the run (trainer and builder) by a ``sitecustomize`` on ``PYTHONPATH``."""

import os
import signal
import subprocess
import sys
import time

import pytest

from realm.run import layout, publication
from tests.helpers import ROOT, builder_pids, data_overrides, subprocess_env
from tests.integration.trainer.conftest import TINY

pytestmark = pytest.mark.slow

FULL_DISK_SITE = '''
import os
import shutil

_FULL = os.environ.get("REALM_TEST_FULL_DISK")
if _FULL:
    _usage = shutil.disk_usage

    def _disk_usage(path):
        usage = _usage(path)
        return usage._replace(free=1024) if os.path.abspath(path).startswith(_FULL) else usage

    shutil.disk_usage = _disk_usage
'''
TIMEOUT_S = 120


def test_a_builder_that_gives_up_on_a_full_disk_stops_the_waiting_trainer_at_once_in_one_line(tiny_world, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(FULL_DISK_SITE)
    builder_config = tmp_path / "builder.yaml"
    fast_retries = "build_retries: 1\nretry_backoff_s: 0.1\n"
    builder_config.write_text((ROOT / "configs/index/tiny.yaml").read_text() + fast_retries)
    run = tmp_path / "run"
    env = {**subprocess_env(), "PYTHONPATH": f"{site}:{ROOT}", "REALM_TEST_FULL_DISK": str(layout.index_dir(run))}
    command = [
        sys.executable, "-m", "realm.cli.main", "train", "--config", TINY, *data_overrides(tiny_world),
        f"--train.run_dir={run}", f"--refresh.builder_config={builder_config}",
        f"--refresh.initial_index_timeout_s={TIMEOUT_S}",
    ]  # fmt: skip
    started = time.monotonic()
    try:
        proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S + 120)
    finally:
        for pid in builder_pids(run):
            os.kill(pid, signal.SIGKILL)
    elapsed = time.monotonic() - started
    errors = [line for line in proc.stderr.splitlines() if line.startswith("realm train:")]
    assert proc.returncode == 2 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-4000:]
    assert errors[0].startswith("realm train: error: the index builder gave up") and "retriever step 0" in errors[0]
    assert str(layout.index_dir(run)) in errors[0] and "space" in errors[0] and "resume" in errors[0]
    assert elapsed < TIMEOUT_S
    log = (run / "builder.log").read_text()
    assert "Traceback" not in log and len([line for line in log.splitlines() if "realm index: error:" in line]) == 1
    # nothing half-written: no index version, no staging folder; the export stays for the resumed run
    assert publication.list_published(layout.index_dir(run), layout.INDEX_PREFIX) == []
    assert not [p for p in layout.index_dir(run).iterdir() if p.name.startswith(".staging")]
    assert layout.latest_retriever_export(run)[0] == 0
