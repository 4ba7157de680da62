"""W&B artefacts of published folders (``realm.training.lineage``): names, content, inputs and outputs, on fake runs
(the offline runs of real jobs are read back in ``tests/integration/tracking``)."""

import json
import logging
from pathlib import Path

import pytest

from realm.training.lineage import (
    artifact_name,
    folder_artifact,
    log_index_version,
    track_folder,
    update_summary,
)


class PublicRun:
    """What lineage calls on a wandb run's public API, recorded: ``(call, name, type, aliases, use_after_commit)``."""

    def __init__(self, offline: bool = True) -> None:
        self.offline, self.disabled, self.calls, self.summary = offline, False, [], {}

    def log_artifact(self, artifact, aliases):
        self.calls.append(("log", artifact.name, artifact.type, aliases, False))

    def use_artifact(self, artifact, aliases):
        self.calls.append(("use", artifact.name, artifact.type, aliases, False))


class FakeRun(PublicRun):
    """wandb 0.31's run, with the private call that records a use."""

    def _log_artifact(self, artifact, aliases, is_user_created, use_after_commit):
        self.calls.append(("log", artifact.name, artifact.type, aliases, use_after_commit))


def _published(folder: Path, files: dict[str, str], **manifest) -> Path:
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    (folder / "manifest.json").write_text(json.dumps({"files": sorted(files), **manifest}))
    return folder


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "my run"
    run.mkdir()
    (run / "config.yaml").write_text("train:\n  run_dir: somewhere\ntracking:\n  run_name: ''\n")
    _published(run / "retriever" / "step-00000002", {"doc.safetensors": "weights"}, step=2)
    _published(run / "index" / "v-00000002", {"index.faiss": "vectors"}, step=2)
    return run


def test_names_come_from_the_run_name_or_the_folder(run_dir: Path) -> None:
    assert artifact_name(run_dir, "retriever") == "my_run-retriever"  # a space is no W&B name character
    (run_dir / "config.yaml").write_text("tracking:\n  run_name: demo\n")
    assert artifact_name(run_dir, "model") == "demo-model"


def test_a_folder_artifact_copies_the_manifest_references_the_rest_and_is_rebuilt_identically(run_dir: Path) -> None:
    folder = run_dir / "retriever" / "step-00000002"
    first = folder_artifact(run_dir, "retriever", "retriever", {"retriever": folder}, {"step": 2})
    entries = first.manifest.entries
    assert not entries["retriever/manifest.json"].ref  # copied: its sha256 list makes the digest the content
    ref = entries["retriever/files/doc.safetensors"].ref
    assert ref == (folder / "doc.safetensors").resolve().as_uri()  # a reference, never a copy
    assert first.metadata == {"config": {"train": {"run_dir": "somewhere"}, "tracking": {"run_name": ""}}, "step": 2}
    again = folder_artifact(run_dir, "retriever", "retriever", {"retriever": folder}, {"step": 2})
    assert again.manifest.digest() == first.manifest.digest()  # what a consumer builds is the producer's version
    (folder / "manifest.json").write_text(json.dumps({"files": ["doc.safetensors"], "step": 2, "sha": "other"}))
    changed = folder_artifact(run_dir, "retriever", "retriever", {"retriever": folder}, {"step": 2})
    assert changed.manifest.digest() != first.manifest.digest()  # other content, another version


def test_the_builder_uses_the_export_and_logs_the_index_version(run_dir: Path) -> None:
    run = FakeRun(offline=True)
    log_index_version(run, run_dir, 2, run_dir / "index" / "v-00000002")
    assert run.calls == [
        ("log", "my_run-retriever", "retriever", ["step-00000002"], True),  # offline, a use is use_after_commit
        ("log", "my_run-index", "index", ["v-00000002", "latest"], False),
    ]
    online = FakeRun(offline=False)
    log_index_version(online, run_dir, 2, run_dir / "index" / "v-00000002")
    assert online.calls == run.calls  # online too: the record use_artifact writes, without its blocking wait
    public = PublicRun(offline=False)  # a wandb without the private call: the public one online, none offline
    log_index_version(public, run_dir, 2, run_dir / "index" / "v-00000002")
    assert [c[0] for c in public.calls] == ["use", "log"]
    offline = PublicRun(offline=True)
    log_index_version(offline, run_dir, 2, run_dir / "index" / "v-00000002")
    assert [c[0] for c in offline.calls] == ["log"]  # the version itself, the use left out (with a warning)


def test_tracking_never_stops_a_job(run_dir: Path, caplog) -> None:
    class Failing(FakeRun):
        def log_artifact(self, artifact, aliases):
            raise ConnectionError("W&B is down")

    with caplog.at_level(logging.WARNING):
        assert track_folder(Failing(), run_dir, "index", "index", {"index": run_dir / "index"}, alias="v-1") is None
    assert "could not log artefact my run-index (ConnectionError: W&B is down)" in caplog.text
    assert track_folder(None, run_dir, "index", "index", {"index": run_dir / "index"}, alias="v-1") is None


def test_summary_goes_to_the_main_process_wandb_tracker_only() -> None:
    run = FakeRun()

    class Tracker:
        name, run = "wandb", None

    Tracker.run = run

    class Main:
        is_main_process, trackers = True, [Tracker()]

    class Other(Main):
        is_main_process = False

    update_summary(Other(), {"step": 3})
    assert run.summary == {}
    update_summary(Main(), {"step": 3, "model": "RUN/model"})
    assert run.summary == {"step": 3, "model": "RUN/model"}
