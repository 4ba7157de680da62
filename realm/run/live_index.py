"""The live index of a run and what may remove published folders: ``index/CURRENT``, activation and pruning, and
the clean-ups that keep a resumed or rebuilt run consistent.

Who does what (the layout itself is ``realm.run.layout``; the rule of publishing is ``realm.run.publication``):

- the index builder makes a published version live (``activate``: CURRENT flipped atomically, then older versions
  pruned), activates a version a killed builder published but never made live (``activate_if_built``), removes
  exports older than the live index (``remove_older_exports``) and a live version whose files no longer match its
  manifest (``remove_if_broken``);
- the trainer, resuming, removes what a killed run published past its checkpoint (``discard_after``);
- every reader asks ``current_index_version`` / ``current_index_step``.

Nothing a checkpoint resumes on (``layout.pinned_steps``) is ever pruned or removed.
"""

from __future__ import annotations

import logging
from pathlib import Path

from realm.core.errors import UserError
from realm.run import layout, publication
from realm.run.layout import INDEX_PREFIX, RETRIEVER_PREFIX, index_dir, retriever_dir
from realm.run.publication import CURRENT, list_published, read_manifest, read_pointer, remove_folder, write_pointer

logger = logging.getLogger(__name__)


class IndexVersionError(UserError, RuntimeError):
    """An index version that is unpublished, partial or corrupt; the message names the folder and the problem."""


def set_current_index(run_dir: str | Path, version: Path) -> None:
    """Makes ``version`` (a published ``index/v-*`` folder) the live index."""
    if read_manifest(version) is None:
        raise IndexVersionError(f"{version}: not a published index version, refusing to make it CURRENT")
    write_pointer(index_dir(run_dir) / CURRENT, Path(version).name)


def current_index_version(run_dir: str | Path) -> Path | None:
    """The folder ``index/CURRENT`` names, or None when no index has been published yet."""
    pointer = index_dir(run_dir) / CURRENT
    name = read_pointer(pointer)
    if name is None:
        return None
    if name != Path(name).name or not name.startswith(INDEX_PREFIX):
        # note: CURRENT is written by set_current_index as a bare folder name; anything else (an absolute path, a
        # path out of the run) is not followed, so the run reads as having no live index and the builder rebuilds
        logger.error("%s names %r, not a version folder inside %s; ignored", pointer, name, index_dir(run_dir))
        return None
    return index_dir(run_dir) / name


def current_index_step(run_dir: str) -> int:
    """Retriever step of the live index, or -1 when there is none (or CURRENT names an unreadable version)."""
    version = current_index_version(run_dir)
    manifest = publication.read_manifest(version) if version is not None else None
    return int(manifest["step"]) if manifest is not None else -1


def activate(run_dir: str | Path, version: Path, keep_versions: int) -> None:
    """Flips CURRENT to ``version``, then prunes old versions (never the live one)."""
    set_current_index(run_dir, version)
    pinned = layout.pinned_steps(run_dir)  # note: what a resume from a kept checkpoint searches
    for removed in publication.prune(layout.index_dir(run_dir), layout.INDEX_PREFIX, keep_versions, pinned):
        logger.info("pruned index version %s", removed.name)


def activate_if_built(run_dir: str | Path, export_step: int, export: dict, keep_versions: int) -> Path | None:
    """Activates ``index/v-{export_step}`` when it is already published from the export's weights (a builder that
    died between the rename and the CURRENT flip) and returns it; otherwise removes any version of that step built
    from other weights (a re-export after a resume) and returns None."""
    final = layout.index_dir(run_dir) / publication.folder_name(layout.INDEX_PREFIX, export_step)
    existing = publication.read_manifest(final)
    if existing is not None and existing.get("weights_sha256") == export["weights_sha256"]:
        logger.info("index version %s already built; activating it", final.name)
        activate(run_dir, final, keep_versions)
        return final
    if final.exists():
        publication.remove_folder(final)
    return None


def remove_older_exports(run_dir: str | Path, export_step: int) -> None:
    """Exports older than the live index are not built again (the builder always takes the newest), unless a
    checkpoint resumes on them: a run resumed from it after a kill may have to rebuild that version."""
    pinned = layout.pinned_steps(run_dir)
    for step, path in publication.list_published(layout.retriever_dir(run_dir), layout.RETRIEVER_PREFIX):
        if step < export_step and step not in pinned:
            try:
                publication.remove_folder(path)
            except OSError as err:
                logger.warning("could not remove old retriever export %s: %s", path, err)


_VERIFIED: set[str] = set()
"""Live versions (``name@created``) whose files this builder has checked; published versions never change."""


def remove_if_broken(run_dir: str) -> bool:
    """Checks the live index version's files against its manifest (once per version) and removes it when they do not
    match, so the builder rebuilds it instead of trusting a manifest the trainer refuses; True when removed."""
    version = current_index_version(run_dir)
    manifest = publication.read_manifest(version) if version is not None else None
    if manifest is None:
        return False
    key = f"{version}@{manifest.get('created')}"
    if key in _VERIFIED:
        return False
    problems = publication.manifest_problems(version)
    if not problems:
        _VERIFIED.add(key)
        return False
    logger.error("live index %s is broken (%s); removing it to rebuild", version, "; ".join(problems))
    publication.remove_folder(version)
    return True


def discard_after(run_dir: str | Path, step: int) -> list[Path]:
    """Removes the retriever exports and index versions of steps after ``step`` and returns them.

    They are what a killed run published past the checkpoint a resumed run starts from; the resumed run exports
    those steps again from its own weights, as an uninterrupted run would have. ``CURRENT`` is moved back first to
    the newest version that stays (or removed), so it never names a removed folder. Call from the trainer's main
    process before its builder starts.
    """
    removed = []
    kept = [(s, p) for s, p in list_published(index_dir(run_dir), INDEX_PREFIX) if s <= step]
    current = current_index_version(run_dir)
    if current is not None and (read_manifest(current) or {}).get("step", -1) > step:
        if kept:
            set_current_index(run_dir, kept[-1][1])
        else:
            (index_dir(run_dir) / CURRENT).unlink(missing_ok=True)
    for parent, prefix in ((index_dir(run_dir), INDEX_PREFIX), (retriever_dir(run_dir), RETRIEVER_PREFIX)):
        for found, path in list_published(parent, prefix):
            if found > step:
                remove_folder(path)
                removed.append(path)
    if removed:
        logger.warning("removed %d export(s)/index version(s) after step %d left by a killed run", len(removed), step)
    return removed
