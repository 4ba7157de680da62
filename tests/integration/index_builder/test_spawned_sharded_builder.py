"""A 1-process trainer spawns a 2-process builder (``refresh.builder_num_processes=2``, torchrun on CPU over gloo):
both ranks build each version, rank 0 publishes, and the builder is gone when the trainer has exited."""

import json

import psutil
import pytest

from realm.run.publication import list_published
from tests.helpers import data_overrides, last_json, run_module

pytestmark = [pytest.mark.slow, pytest.mark.distributed]


def _processes_naming(path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if any(str(path) in arg for arg in proc.info["cmdline"] or ()):
            found.append(proc)
    return found


def test_trainer_spawns_a_two_process_builder_that_publishes_its_indexes(tiny_world, tmp_path):
    run = tmp_path / "run"
    proc = run_module(
        "realm.trainer.pretrain",
        "--config",
        "configs/pretrain/tiny.yaml",
        f"--train.run_dir={run}",
        "--train.max_steps=4",
        "--refresh.builder_num_processes=2",
        *data_overrides(tiny_world),
        timeout=120,
    )
    summary = last_json(proc.stdout)
    log = (run / "builder.log").read_text()
    assert summary["step"] == 4
    assert summary["num_index_refreshes"] >= 2, log[-3000:]  # the initial index and the one after step 2
    assert "index builder: 2 process(es)" in log
    manifests = [json.loads((p / "manifest.json").read_text()) for _, p in list_published(run / "index", "v-")]
    assert len(manifests) >= 2 and all(m["builder_processes"] == 2 for m in manifests), manifests
    # the trainer stopped torchrun on its way out, and torchrun its ranks
    assert not _processes_naming(run)
