"""W&B artefacts with lineage: what each job publishes in its run directory, as artefacts of its W&B run.

The chain a researcher follows in W&B: ``warmup-encoder`` and ``ict-retriever`` (the warm starts) -> the pre-training
run, which logs every ``retriever`` export and uses every ``index`` version it swaps in -> its final ``model`` (the
last checkpoint) -> the QA run, which uses that model and logs its frozen ``index`` and its ``qa-model``. The index
builder's run closes export -> index with ``log_index_version`` (it uses the export it embedded and logs the version).

An artefact names a published folder (``realm.run.publication``): its ``manifest.json`` is copied in, so the
artefact's digest is its content (the manifest lists every file's sha256), and the files themselves are
``file://`` references with ``checksum=False`` (a digest of the path): weights and indexes are never hashed again
nor copied, so an offline run stays small (``RUN/wandb``) and building the artefact of a 440 MB export takes ~1 ms
(with ``checksum=True``, 1.8 s: an md5 of every byte, on the trainer's critical path at every export); the price
is that ``artifact.download()`` works only where the run directory is. A consumer rebuilds the producer's artefact
from the same folder (``folder_artifact``), so both runs name the same version: W&B links them by that digest, which
is also how a use is recorded offline, where wandb refuses ``use_artifact`` (``use_input``). Each artefact's metadata
carries the producing run's ``config.yaml`` and the folder's step.

Artefact names are ``{run name}-{kind}`` (the run name is the W&B run name/group, ``tracking.run_name`` or the run
directory's name), versions are told apart by aliases (``step-00000500``, ``v-00000500``). Tracking never stops a
job: a failure to log an artefact is one warning.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Mapping

import yaml

from realm.run.layout import CHECKPOINT_PREFIX, CONFIG_FILE, INDEX_PREFIX, RETRIEVER_PREFIX, retriever_dir
from realm.run.publication import MANIFEST, folder_name, read_manifest

logger = logging.getLogger(__name__)

RETRIEVER, INDEX, MODEL, QA_MODEL = "retriever", "index", "model", "qa-model"
"""Artefact types (and the kinds in their names)."""
QA_INDEX = "qa-index"
"""Kind of a QA run's frozen index (type ``index``)."""
PUBLISHED_KINDS = {"ict_retriever": ("ict-retriever", RETRIEVER), "reader_warmup_encoder": ("warmup-encoder", MODEL)}
"""A warm start's manifest ``kind`` -> (artefact kind, type) of the folder its stage publishes as ``RUN/<folder>``."""


def wandb_run(accelerator: Any) -> Any | None:
    """The W&B run among ``accelerator``'s trackers on the main process, else None."""
    if not getattr(accelerator, "is_main_process", False):
        return None
    for tracker in getattr(accelerator, "trackers", []):
        if tracker.name == "wandb":
            return tracker.run
    return None


def run_config(run_dir: str | Path) -> dict[str, Any]:
    """The run's ``config.yaml`` as a dict ({} when it has none)."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text())
    return data if isinstance(data, dict) else {}


def artifact_name(run_dir: str | Path, kind: str) -> str:
    """``{run name}-{kind}``, the run name as ``realm.core.tracking.resolve_run_name`` gives it (read back from the
    run's ``config.yaml``, so another job finds a run's artefacts), with what W&B refuses in a name replaced."""
    tracking = run_config(run_dir).get("tracking") or {}
    name = str(tracking.get("run_name") or "") or Path(run_dir).resolve().name
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{name}-{kind}")


def folder_artifact(run_dir: str | Path, kind: str, type_: str, folders: Mapping[str, str | Path],
                    metadata: Mapping[str, Any] | None = None) -> Any:  # fmt: skip
    """A ``wandb.Artifact`` of run ``run_dir`` holding each published folder of ``folders`` (``{prefix: folder}``):
    ``prefix/manifest.json`` copied, ``prefix/files/...`` as references; the run's config in its metadata."""
    import wandb

    artifact = wandb.Artifact(artifact_name(run_dir, kind), type=type_,
                              metadata={"config": run_config(run_dir), **(metadata or {})})  # fmt: skip
    for prefix, folder in folders.items():
        folder = Path(folder).resolve()
        if (folder / MANIFEST).is_file():
            artifact.add_file(str(folder / MANIFEST), name=f"{prefix}/{MANIFEST}")
        artifact.add_reference(folder.as_uri(), name=f"{prefix}/files", checksum=False)
    return artifact


def log_output(run: Any, artifact: Any, aliases: list[str]) -> None:
    """``artifact`` as an output of ``run``."""
    run.log_artifact(artifact, aliases=[*aliases, "latest"])


def use_input(run: Any, artifact: Any, aliases: list[str]) -> None:
    """``artifact`` as an input of ``run``. For a local artefact ``run.use_artifact`` logs it marked
    ``use_after_commit`` (W&B records the use once the version is committed), then blocks until the server has
    committed it; offline, wandb 0.31 refuses it outright ("Cannot use artifact when in offline mode"). So the record
    is written directly (private ``_log_artifact``): offline ``wandb sync`` then marks the use, and online the trainer,
    which calls this when it swaps an index in, never waits on the network between steps. A wandb without it: the
    public call online, and offline the use is left out with a warning (the metadata still names the producer)."""
    if hasattr(run, "_log_artifact"):
        run._log_artifact(artifact, aliases=aliases, is_user_created=True, use_after_commit=True)
    elif not run.offline:
        run.use_artifact(artifact, aliases=aliases)
    else:
        logger.warning("W&B: this wandb cannot record the use of %s offline; left out", artifact.name)


def track_folder(run: Any, run_dir: str | Path, kind: str, type_: str, folders: Mapping[str, str | Path], *,
                 alias: str, used: bool = False, metadata: Mapping[str, Any] | None = None) -> Any:  # fmt: skip
    """Logs (or with ``used``, uses) the artefact of ``folders``; returns it, or None without a run or on failure
    (one warning: tracking never stops a job)."""
    if run is None or getattr(run, "disabled", False):
        return None
    try:
        artifact = folder_artifact(run_dir, kind, type_, folders, metadata)
        (use_input if used else log_output)(run, artifact, [alias])
        return artifact
    except Exception as err:  # noqa: BLE001 - a tracker's failure must not end training
        logger.warning("W&B: could not %s artefact %s-%s (%s: %s)", "use" if used else "log", Path(run_dir).name,
                       kind, type(err).__name__, err)  # fmt: skip
        return None


# ------------------------------------------------------------------------------------------- what jobs publish


def log_retriever_export(accelerator: Any, run_dir: Path, step: int, folder: Path) -> None:
    """A retriever export (``RUN/retriever/step-N``), an output of the pre-training run."""
    track_folder(wandb_run(accelerator), run_dir, RETRIEVER, RETRIEVER, {"retriever": folder},
                 alias=folder_name(RETRIEVER_PREFIX, step), metadata={"step": step})  # fmt: skip


def index_artifact(run: Any, folder: Path, step: int, *, used: bool, kind: str = INDEX) -> Any:
    """Index version ``RUN/index/v-N`` (built from the export of step N): used by the trainer that swaps it in, or
    logged by the process that built it (the index builder's run, ``log_index_version``; a QA run's frozen index,
    under its own ``kind`` so that its ``v-00000000`` is not taken for a pre-training run's when both runs share a
    run name)."""
    run_dir = Path(folder).resolve().parent.parent
    retriever = f"{artifact_name(run_dir, RETRIEVER)}:{folder_name(RETRIEVER_PREFIX, step)}"
    return track_folder(run, run_dir, kind, INDEX, {"index": folder}, alias=folder_name(INDEX_PREFIX, step), used=used,
                        metadata={"step": step, "retriever": retriever})  # fmt: skip


def use_index_version(accelerator: Any, index: Any) -> None:
    """The ``PublishedIndex`` the trainer just swapped in, an input of its run (main process; no-op elsewhere)."""
    run = wandb_run(accelerator)
    if run is not None:
        index_artifact(run, index.path, index.step, used=True)


def log_index_version(run: Any, run_dir: Path, step: int, folder: Path) -> None:
    """For the index builder's W&B run (``realm.core.tracking.init_builder_run``), after it publishes a version: the
    retriever export it embedded as an input, the version as an output; so W&B draws export -> build -> index."""
    export = retriever_dir(run_dir) / folder_name(RETRIEVER_PREFIX, step)
    if export.is_dir():
        track_folder(run, run_dir, RETRIEVER, RETRIEVER, {"retriever": export}, alias=export.name, used=True,
                     metadata={"step": step})  # fmt: skip
    index_artifact(run, folder, step, used=False)


def model_artifact(accelerator: Any, run_dir: str | Path, checkpoint: str | Path, *, used: bool) -> Any:
    """The pre-trained model: the checkpoint folder a QA run starts from (``init.run``/``init.checkpoint``), logged by
    the pre-training run at its last step, used by the QA run."""
    manifest = read_manifest(Path(checkpoint)) or {}
    step = int(manifest.get("step", 0))
    return track_folder(wandb_run(accelerator), run_dir, MODEL, MODEL, {"checkpoint": checkpoint},
                        alias=folder_name(CHECKPOINT_PREFIX, step), used=used, metadata={"step": step})  # fmt: skip


def warm_start_artifact(accelerator: Any, folder: str | Path, *, used: bool) -> Any:
    """What ``realm warmup`` / ``realm ict`` published (``PUBLISHED_KINDS``): an output of its run, or an input of the
    job warm-started from it (pre-training); a folder of any other origin (a BERT) is no artefact of ours: skipped."""
    manifest = read_manifest(Path(folder)) or {}
    if manifest.get("kind") not in PUBLISHED_KINDS:
        return None
    kind, type_ = PUBLISHED_KINDS[manifest["kind"]]
    return track_folder(wandb_run(accelerator), Path(folder).resolve().parent, kind, type_, {kind: folder},
                        alias=folder_name("step-", int(manifest.get("steps", 0))), used=used)  # fmt: skip


def update_summary(accelerator: Any, summary: Mapping[str, Any]) -> None:
    """``summary`` (a job's end figures, what ``realm train`` prints / ``summary.json`` holds) into the W&B run's
    summary; no-op without one."""
    run = wandb_run(accelerator)
    if run is not None and not getattr(run, "disabled", False):
        run.summary.update(dict(summary))


def end_job_tracking(accelerator: Any, published: Path, step: int) -> None:
    """The end of a warm-start job (``realm warmup``, ``realm ict``): its published folder as an artefact (when the
    job ran all its steps and published it), its step and output in the W&B run's summary, then the trackers finish
    (not ``end_training``, which also ends the process group: a pipeline runs its next stage in the same processes)."""
    if wandb_run(accelerator) is not None:
        warm_start_artifact(accelerator, published, used=False)
        update_summary(accelerator, {"step": step, "output": str(Path(published).resolve())})
    for tracker in accelerator.trackers:
        tracker.finish()
