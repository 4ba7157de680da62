"""The data that ships with the package: the YAML recipes (``configs/``) and the launch scripts (``launch/``).

Both folders sit at the repository's top level, where the README, the configs' own defaults (``configs/...``) and
the scripts name them, and setup.cfg installs them as ``realm/configs`` and ``realm/launch`` (package data). So the
installed copy is read through ``importlib.resources`` and, in a checkout or an editable install (where ``realm/`` has
no such folder), the checkout's own folder is used: one lookup for a wheel, ``pip install .`` and ``pip install -e .``.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Literal

DataFolder = Literal["configs", "launch"]

CHECKOUT_ROOT = Path(__file__).resolve().parents[2]
"""The repository root when running from a checkout (``realm/core/`` is two levels down)."""


def data_dir(name: DataFolder) -> Path:
    """The folder ``name`` as installed with the package, else the checkout's (``configs/``, ``launch/``)."""
    # note: a wheel installs unpacked, so files() is a real folder; a zip-imported realm would need as_file()
    installed = Path(str(importlib.resources.files("realm"))) / name
    return installed if installed.is_dir() else CHECKOUT_ROOT / name


def packaged_config(path: str | Path) -> Path | None:
    """The packaged copy of ``configs/...`` (``configs/pretrain/tiny.yaml``), or None: a path not under
    ``configs/``, or no such file."""
    parts = Path(path).parts
    if len(parts) < 2 or parts[0] != "configs":
        return None
    candidate = data_dir("configs").joinpath(*parts[1:])
    return candidate if candidate.is_file() else None
