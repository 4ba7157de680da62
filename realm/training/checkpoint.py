"""Crash-safe training checkpoints: full state in ``RUN/checkpoints/step-NNNNNNNN``, published by rename.

A checkpoint holds what is needed to continue exactly: model, optimizer and RNG states (through
``accelerator.save_state``, which writes model weights with safetensors and reloads the rest with
``weights_only=True``), the LR scheduler's state as JSON (``scheduler.json``: accelerate's loader of registered
custom objects unpickles with ``weights_only=False``, so the scheduler is not registered with it), plus
``trainer_state.json`` (step, index version, running totals), the resolved config, and a process's own tensors
where a job has some (``rank-N.safetensors``: the pre-training trainer's candidates searched ahead).
The batch order is a function of (seed, step), so no data-loader state is needed. Every training job writes
its checkpoints this way (``realm.training.scaffold``).
"""

from __future__ import annotations

import json
import logging
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor

from realm.core.atomic import disk_writes
from realm.core.config import save_config
from realm.core.errors import MissingFileError, RunError
from realm.run.layout import CHECKPOINT_PREFIX, CONFIG_FILE, EXPORT_STEP, INDEX_STEP, checkpoints_dir
from realm.run.publication import (
    STAGING_PREFIX,
    file_entries,
    folder_name,
    list_published,
    manifest_problems,
    now_iso,
    prune,
    publish_folder,
    read_manifest,
    relative_files,
    remove_folder,
)

logger = logging.getLogger(__name__)
TRAINER_STATE = "trainer_state.json"
SCHEDULER_STATE = "scheduler.json"
RANK_TENSORS = "rank-{rank}.safetensors"
"""Tensors of one process's own (e.g. the candidates it searched ahead), beside the states accelerate saves."""


def save_checkpoint(
    accelerator, run_dir: str | Path, step: int, state: dict[str, Any], config: Any, keep: int, scheduler,
    rank_tensors: dict[str, Tensor] | None = None,
) -> Path:  # fmt: skip
    """Writes the checkpoint of ``step`` under a staging name, publishes it, then prunes to the newest ``keep``.

    ``rank_tensors``: this process's own tensors (each process passes its own), read back by ``load_rank_tensors``.
    A full or read-only disk is a ``DiskError`` naming the path: nothing of ``step`` is published, and the run
    resumes from the checkpoint before it.
    """
    # note: torch.save (the optimizer's state, through accelerate) reports a failed write without its errno
    with disk_writes(checkpoints_dir(run_dir), opaque_writer=True):
        return _write_checkpoint(accelerator, run_dir, step, state, config, keep, scheduler, rank_tensors)


def _write_checkpoint(
    accelerator, run_dir: str | Path, step: int, state: dict[str, Any], config: Any, keep: int, scheduler,
    rank_tensors: dict[str, Tensor] | None,
) -> Path:  # fmt: skip
    parent = checkpoints_dir(run_dir)
    # note: a step-derived staging name (not a uuid) so every rank writes into the same folder.
    staging = parent / f"{STAGING_PREFIX}{folder_name(CHECKPOINT_PREFIX, step)}"
    final = parent / folder_name(CHECKPOINT_PREFIX, step)
    if accelerator.is_main_process:
        parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(staging, ignore_errors=True)  # a leftover of a crash at this very step
        if final.exists() and read_manifest(final) is None:
            # note: a folder of this step without a readable manifest was never published (a torn manifest or a kill
            # mid-rename): garbage that would otherwise block the rename below on every rerun
            logger.warning("removing %s: an unpublished checkpoint folder left by a killed run", final)
            remove_folder(final)
        staging.mkdir()
    accelerator.wait_for_everyone()
    accelerator.save_state(str(staging))
    if rank_tensors:
        tensors = {name: t.detach().cpu().contiguous() for name, t in rank_tensors.items()}
        save_file(tensors, staging / RANK_TENSORS.format(rank=accelerator.process_index))
    accelerator.wait_for_everyone()  # note: every file is written before the main process lists them
    if accelerator.is_main_process:
        (staging / TRAINER_STATE).write_text(json.dumps({"step": step, **state}, indent=2))
        (staging / SCHEDULER_STATE).write_text(json.dumps(scheduler.state_dict(), indent=2))
        save_config(config, staging / CONFIG_FILE)
        names = relative_files(staging)
        manifest = {"step": step, "created": now_iso(), "kind": "checkpoint", "files": file_entries(staging, names)}
        for key in (INDEX_STEP, EXPORT_STEP):
            # note: in the manifest, so the index builder reads which index versions this checkpoint resumes on and
            # never prunes them (realm.run.layout.pinned_steps) without knowing the trainer's state format
            if state.get(key) is not None:
                manifest[key] = state[key]
        publish_folder(staging, final, manifest)
        prune(parent, CHECKPOINT_PREFIX, keep)
        logger.info("saved checkpoint %s", final)
    accelerator.wait_for_everyone()
    return final


def set_aside(path: Path, why: str) -> Path:
    """Renames the published checkpoint ``path`` to ``path.name + "." + why`` (``.2``, ``.3`` ... if taken) and returns
    the new path: out of every listing (not a ``step-N`` name), so it no longer stands in the way of saving its step
    again, and kept for the user to inspect or delete."""
    target = path.with_name(f"{path.name}.{why}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.{why}.{n}")
    path.rename(target)
    return target


def resolve_resume(run_dir: str | Path, resume: str, set_aside_rejected: bool = False, *,
                   none_verified: str = "rerun with --train.resume=never to start over") -> Path | None:  # fmt: skip
    """The checkpoint to resume from: for ``auto`` the newest complete one whose files match their checksums (a
    corrupt one is reported and the next older one is used), none for ``never`` (which, with ``set_aside_rejected``,
    sets every published checkpoint aside as ``.superseded``: the fresh run saves those steps again), or the given
    folder (verified).
    ``none_verified`` is the advice of the error when none does: the caller's (what its user can pass), as the
    inspection commands take no ``--train.resume``.

    ``set_aside_rejected`` (the main process, before the others resolve): each checkpoint newer than the one chosen is
    set aside (``set_aside``) as ``.failed-verification`` or, when an older one was asked for, ``.superseded``: the
    resumed run saves those steps again, and a published folder is never overwritten. When no checkpoint verifies,
    nothing is moved and the run stops with an error.
    """
    published = list_published(checkpoints_dir(run_dir), CHECKPOINT_PREFIX)
    if resume == "never":
        # note: a fresh start saves steps the run directory may already hold; set aside, they are neither
        # overwritten (a FileExistsError traceback at the first save) nor lost
        if set_aside_rejected:
            for _, path in published:
                moved = set_aside(path, "superseded")
                logger.warning("train.resume=never: set aside checkpoint %s as %s", path, moved.name)
        return None
    rejected: list[tuple[Path, str]] = []
    if resume == "auto":
        chosen = None
        for _, path in reversed(published):
            problems = manifest_problems(path)
            if not problems:
                chosen = path
                break
            logger.error("checkpoint %s fails verification (%s); trying the next older one", path, "; ".join(problems))
            rejected.append((path, "failed-verification"))
        if chosen is None:
            if published:
                raise RunError(
                    f"no checkpoint under {checkpoints_dir(run_dir)} passes verification (see the errors above); "
                    f"{none_verified}"
                )
            return None
    else:
        chosen = Path(resume)
        if read_manifest(chosen) is None:
            raise MissingFileError(f"resume={resume!r} is not a complete checkpoint (no readable manifest.json)")
        problems = manifest_problems(chosen)
        if problems:
            raise RunError(f"resume={resume!r} fails verification: {'; '.join(problems)}")
        step = read_manifest(chosen).get("step", -1)
        if chosen.resolve().parent == checkpoints_dir(run_dir).resolve():
            rejected = [(path, "superseded") for found, path in published if found > step]
    if set_aside_rejected:
        for path, why in rejected:
            moved = set_aside(path, why)
            logger.error("set aside checkpoint %s as %s (this run saves its step again)", path, moved.name)
    return chosen


def load_checkpoint(accelerator, path: Path, scheduler) -> dict[str, Any]:
    """Restores model/optimizer/scheduler/RNG states and returns the saved trainer state (with ``step``)."""
    try:
        accelerator.load_state(str(path))
    except ValueError as err:  # note: torch's optimizer load_state_dict: the parameter groups differ
        if "parameter group" not in str(err):
            raise
        raise RunError(f"{path}: its optimizer state does not fit this run's optimizer ({err}); resume with the config "
                       "it was saved with (retriever.frozen, for one, changes the parameter groups)") from None
    scheduler.load_state_dict(json.loads((path / SCHEDULER_STATE).read_text()))
    state = json.loads((path / TRAINER_STATE).read_text())
    logger.info("resumed from %s at step %d", path, state["step"])
    return state


def load_rank_tensors(path: Path, rank: int) -> dict[str, Tensor]:
    """The tensors process ``rank`` saved in the checkpoint at ``path`` ({} when it saved none)."""
    file = path / RANK_TENSORS.format(rank=rank)
    return load_file(file) if file.is_file() else {}


def load_weights(model: torch.nn.Module, weights: Path) -> torch.nn.Module:
    """Loads a checkpoint's ``model.safetensors`` into ``model`` (of the checkpoint's shape) and returns it.

    accelerate saves the model without the tensors that alias another one (the MLM decoder tied to the word
    embeddings: safetensors cannot store aliases), so a missing key is accepted only when a tensor it aliases was
    loaded; any other missing key, an unexpected key or a shape mismatch is a ``RunError`` naming the file.
    """
    try:
        state = load_file(str(weights))
    except Exception as err:  # noqa: BLE001 - safetensors raises its own SafetensorError
        raise RunError(f"cannot read {weights}: {err}") from None
    try:
        result = model.load_state_dict(state, strict=False)
    except RuntimeError as err:  # shape mismatches
        raise RunError(f"{weights} does not fit the model of the run's config: {err}") from None
    aliases: dict[int, list[str]] = defaultdict(list)
    for name, tensor in model.state_dict().items():
        aliases[tensor.untyped_storage().data_ptr()].append(name)
    alias_of = {name: names for names in aliases.values() for name in names}
    untied = [k for k in result.missing_keys if not any(a in state for a in alias_of.get(k, []) if a != k)]
    if untied or result.unexpected_keys:
        raise RunError(
            f"{weights} does not match the model of the run's config: missing {untied[:5]}"
            f"{' ...' if len(untied) > 5 else ''}, unexpected {result.unexpected_keys[:5]}"
            f"{' ...' if len(result.unexpected_keys) > 5 else ''}"
        )
    return model
