"""How a run records the paths it was given, so that the run folder can move (another mount, another node, a copy).

A run records paths in two kinds of files, and reads them back by one rule.

- ``config.yaml`` (the run's and each checkpoint's) is also a config a user passes back with ``--config``, which
  reads a relative value against the current directory; so every local path a job was given is written there
  **absolute** (``absolute_paths``, resolved against the directory the job was launched from), with
  ``train.run_dir`` the run's own absolute location. Hub names (``bert-base-uncased``), ``hf:`` splits and the bundled
  recipes (``configs/...``, found from any directory) are kept as given.
- Manifests of published folders: a path inside the run is stored **relative to the run** (``record_path``; the
  manifest's ``run_root`` says where the run is from the folder, e.g. ``../..``), any other absolute; every manifest
  also records where it was published (``published_at``). ``realm.run.publication.read_manifest`` resolves them.

Reading a recorded path back (``locate``), with the run recorded at ``A`` and found now at ``B``:

1. a path inside the run (under ``A``) is read inside ``B``: a copied run reads its own files, not the original's;
2. any other path is read as recorded when it exists: an input that stayed where it was (the corpus on a shared
   mount) is found after the run moved away from it;
3. else where the move took it: the run moved from ``A`` to ``B``; their common trailing folders are stripped
   (``/x/demo/qa`` -> ``/y/demo/qa`` is a move of ``/x`` to ``/y``), and the path is read under the new location, so
   the stages of a pipeline (a demo's ``qa/`` reads the demo's ``blocks/``) find each other after the whole folder
   moved;
4. else it is missing: the command that needs it stops with one line naming the key, the path and the override
   (``missing_path_error``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any, Iterator

logger = logging.getLogger(__name__)

PATH_FIELDS = frozenset({
    "run_dir", "init_retriever", "init_encoder", "init_from", "tokenizer", "blocks", "sentences", "heldout",
    "heldout_articles", "cache_dir", "builder_config", "train", "dev", "run", "checkpoint", "bert", "retriever",
    "index",
})  # fmt: skip
"""Names of the string fields of a job's config that hold a local path (or a hub name / ``hf:`` split, kept as given:
only values that name an existing file or folder are made absolute). ``train.resume`` is not one: its ``auto`` and
``never`` are keywords, and a checkpoint it names is chosen once, for that invocation."""
OUTPUT_FIELDS = frozenset({"run_dir", "cache_dir"})
"""Path fields a job writes to (created when missing): made absolute whether they exist yet or not, never missing."""
CONFIG_FILE_FIELDS = frozenset({"builder_config"})
"""Path fields naming a YAML config: a bundled recipe (``configs/...``), which every command finds from any directory
(``realm.core.config.resolve_config_path``), stays relative, so the run works with another checkout or install."""
MANIFEST_PATH_KEYS = ("blocks", "tokenizer", "index")
"""Keys of a manifest that hold a path (a retriever export's inputs, an index's blocks, a QA model's index)."""
PUBLISHED_AT = "published_at"
"""Manifest field: the absolute folder the manifest was published as (what a move is measured from)."""
RUN_ROOT = "run_root"
"""Manifest field: the run directory relative to the manifest's folder (``../..``), which relative paths are under."""


# ---------------------------------------------------------------------------------------------- the rule


def moved_root(recorded: str | Path, current: str | Path) -> tuple[Path, Path] | None:
    """``(old, new)``: what moved, when a folder recorded at ``recorded`` is now at ``current`` (their common trailing
    names stripped); None when both are the same folder or ``recorded`` is relative (a record older than this rule)."""
    old, new = Path(recorded), Path(os.path.abspath(current))
    if not old.is_absolute() or old == new:
        return None
    while old.name and old.name == new.name and old.parent != old and new.parent != new:
        old, new = old.parent, new.parent
    return old, new


def _under(path: Path, root: Path) -> Path | None:
    """``path`` relative to ``root`` when it lies under it (lexically), else None."""
    try:
        return path.relative_to(root)
    except ValueError:
        return None


def locate(value: str, recorded_run: str | Path | None, current_run: str | Path) -> str:
    """Where a path recorded by a run (recorded at ``recorded_run``, now at ``current_run``) is now, by the module's
    rule; ``value`` itself when nothing better exists (a hub name, or a missing path for the caller to report)."""
    if not value or recorded_run is None:
        return value
    path, recorded = Path(value), Path(recorded_run)
    inside = _under(path, recorded)
    if inside is not None:  # 1. a path of the run itself (an old relative record too: runs/x/tokenizer under runs/x)
        here = Path(os.path.abspath(current_run)) / inside
        return str(here) if here.exists() or not path.exists() else value
    if path.exists() or not path.is_absolute():  # 2. where it was (relative values of old records stay as given)
        return value
    moved = moved_root(recorded, current_run)  # 3. where the move took it
    if moved is not None and (rest := _under(path, moved[0])) is not None and (moved[1] / rest).exists():
        return str(moved[1] / rest)
    return value


def missing_path_error(key: str, value: str, where: str, override: str) -> str:
    """The one line a command stops with when a recorded path is found nowhere."""
    return (f"{key}={value} (recorded in {where}) not found, even where the run's move would have taken it; "
            f"pass {override} with its new location")  # fmt: skip


# ---------------------------------------------------------------------------------------------- config.yaml


def _path_fields(config: Any, prefix: str = "") -> Iterator[tuple[Any, str, str]]:
    """``(section, name, dotted key)`` of every path field of a config tree holding a non-empty string."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value):
            yield from _path_fields(value, f"{prefix}{f.name}.")
        elif f.name in PATH_FIELDS and isinstance(value, str) and value:
            yield config, f.name, f"{prefix}{f.name}"


def absolute_paths(config: Any) -> None:
    """Makes every local path of ``config`` absolute, in place (what ``config.yaml`` records; see the module)."""
    for section, name, _ in _path_fields(config):
        value = getattr(section, name)
        if Path(value).is_absolute() or not (Path(value).exists() or name in OUTPUT_FIELDS):
            continue
        if name in CONFIG_FILE_FIELDS and Path(value).parts[:1] == ("configs",):
            continue
        setattr(section, name, os.path.abspath(value))


def relocate(config: Any, current_run: str | Path, recorded_run: str | None) -> list[tuple[str, str, str]]:
    """Points the path fields of ``config`` (a run's recorded config, or one resuming it) at where the run now is, in
    place, by ``locate``; ``train.run_dir`` becomes ``current_run``. Returns ``(key, old, new)`` of each change."""
    changed = []
    for section, name, key in _path_fields(config):
        old = getattr(section, name)
        is_run_dir = name == "run_dir" and key.count(".") <= 1
        new = str(current_run) if is_run_dir else locate(old, recorded_run, current_run)
        if new != old:
            setattr(section, name, new)
            changed.append((key, old, new))
    return changed


def missing_paths(config: Any) -> list[tuple[str, str]]:
    """``(key, value)`` of the absolute path fields of ``config`` found nowhere (a relative one may be a hub name)."""
    return [(key, value) for section, name, key in _path_fields(config) if name not in OUTPUT_FIELDS
            and Path(value := getattr(section, name)).is_absolute() and not Path(value).exists()]  # fmt: skip


def prepare_job_config(config: Any, run_dir: str | Path, recorded_run: str | None, config_file: str | Path) -> None:
    """What a job does to its config before it reads anything (``realm.training.scaffold.start_job``): a run that
    moved since ``config_file`` recorded it at ``recorded_run`` (a resume on another mount or node) reads its paths
    where they are now (``relocate``, each change logged), then every local path is made absolute for the
    ``config.yaml`` the job writes. Raises ``MissingFileError`` naming the first path of a moved run found nowhere."""
    from realm.core.errors import MissingFileError

    # note: a record older than this rule holds a run_dir relative to where it was launched; its paths under it are
    # still found (locate's rule 1), so such a run resumes from another directory too
    if recorded_run is not None and os.path.abspath(recorded_run) != os.path.abspath(run_dir):
        for key, old, new in relocate(config, run_dir, recorded_run):
            logger.warning("the run moved from %s: %s=%s is read at %s", recorded_run, key, old, new)
        for key, value in missing_paths(config):
            raise MissingFileError(missing_path_error(key, value, str(config_file), f"--{key}=PATH"))
    absolute_paths(config)


def load_run_config(cls: type, config_file: str | Path, run_dir: str | Path, overrides: list[str] | None = None) -> Any:
    """A run's ``config.yaml`` (plus dotted ``overrides``, e.g. ``--data.blocks=PATH`` for blocks that moved apart
    from the run) with its paths where they are now (``relocate``): what the inspection commands read."""
    from realm.core.config import load_config

    config = load_config(cls, config_file, overrides)
    relocate(config, run_dir, recorded_run_dir(config_file))
    return config


def recorded_run_dir(config_file: str | Path) -> str | None:
    """``train.run_dir`` as the run's ``config.yaml`` recorded it (None without one)."""
    import yaml

    try:
        data = yaml.safe_load(Path(config_file).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    value = (data.get("train") or {}).get("run_dir") if isinstance(data, dict) else None
    return value if isinstance(value, str) and value else None


# ---------------------------------------------------------------------------------------------- manifests


def record_path(path: str | Path, run_dir: str | Path) -> str:
    """How a manifest in ``run_dir`` records a local ``path``: relative to the run when inside it, else absolute;
    anything that is not a local path (a hub name) as given."""
    if not Path(path).exists():
        return str(path)
    absolute, run = Path(os.path.abspath(path)), Path(os.path.abspath(run_dir))
    inside = _under(absolute, run)
    return str(absolute) if inside is None else inside.as_posix() or "."


def run_root(folder: str | Path, run_dir: str | Path) -> str:
    """``run_dir`` relative to the published ``folder`` (``../..`` for ``RUN/retriever/step-N``): a manifest's
    ``RUN_ROOT``."""
    return Path(os.path.relpath(os.path.abspath(run_dir), os.path.abspath(folder))).as_posix()


def resolve_manifest(manifest: dict[str, Any], folder: str | Path) -> dict[str, Any]:
    """``manifest`` (read from ``folder``) with each path key where it is now (``locate``): relative values under the
    run its ``RUN_ROOT`` names, absolute ones as recorded or where the move took them (from ``PUBLISHED_AT``)."""
    recorded_at = manifest.get(PUBLISHED_AT)
    if recorded_at is None or not any(isinstance(manifest.get(key), str) for key in MANIFEST_PATH_KEYS):
        return manifest
    resolved = dict(manifest)
    root = manifest.get(RUN_ROOT)
    for key in MANIFEST_PATH_KEYS:
        value = manifest.get(key)
        if not isinstance(value, str) or not value:
            continue
        if not Path(value).is_absolute():
            if isinstance(root, str) and (here := Path(os.path.abspath(Path(folder) / root / value))).exists():
                resolved[key] = str(here)
            continue
        resolved[key] = locate(value, recorded_at, folder)
    return resolved
