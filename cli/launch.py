"""``realm launch``: the launch scripts (accelerate topologies, the index builder on GPUs of its own, Slurm) from an
installed package.

    realm launch copy [DIR]          put the packaged launch/ folder into DIR (default: here)
    realm launch NAME [ARGS]         run launch/NAME.sh with ARGS (exec: signals and exit code are the script's)

The scripts run relative to the folder that holds ``launch/`` (they ``cd`` there, as in a checkout, so
``launch/accelerate/*.yaml`` and the relative paths of a command line resolve against it); inside site-packages that
would put runs into the installation. So ``realm launch NAME`` runs the ``launch/NAME.sh`` of the current directory
(a checkout, or a project folder after ``realm launch copy``), else the checkout's when realm runs from one
(``pip install -e .``), and otherwise says to copy them first. The copy is also where a cluster's own settings go
(the Slurm scripts' partition and account). NAME is any script of the packaged folder but the sourced
``common.sh`` (``realm launch --help`` lists them).
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

from realm.core.errors import USER_ERROR_EXIT_CODE, ArgumentError
from realm.core.resources import CHECKOUT_ROOT, data_dir

USAGE = __doc__.split("\n\n")[1]
HELPER_SCRIPTS = ("common.sh",)
"""Sourced by the others, never run."""


def script_names(folder: Path) -> list[str]:
    """The runnable scripts of a ``launch/`` folder, by name (``pretrain``, ``finetune``)."""
    return sorted(p.stem for p in folder.glob("*.sh") if p.name not in HELPER_SCRIPTS)


def copy_scripts(dest: Path) -> Path:
    """Copies the packaged ``launch/`` folder to ``dest/launch`` (scripts executable) and returns it; refuses to
    overwrite an existing one (a user's edited copy)."""
    target = dest / "launch"
    if target.exists():
        raise ArgumentError(f"{target}/ exists already (an edited copy?); remove it, or copy into another folder")
    if not dest.is_dir():
        raise ArgumentError(f"{dest} is not a folder")
    shutil.copytree(data_dir("launch"), target, ignore=shutil.ignore_patterns("__pycache__", "*.py", "*.pyc"))
    for path in (*target.glob("*.sh"), *target.glob("slurm/*")):
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return target


def find_script(name: str, cwd: Path) -> Path:
    """``launch/{name}.sh`` of ``cwd``, else of the checkout realm runs from; a one-line error otherwise."""
    packaged = data_dir("launch")
    known = script_names(packaged)
    if name not in known:
        raise ArgumentError(f"no launch script {name!r}; one of: {', '.join(known)}, or copy")
    for folder in (cwd / "launch", packaged if packaged.parent == CHECKOUT_ROOT else None):
        if folder is not None and (folder / f"{name}.sh").is_file():
            return folder / f"{name}.sh"
    raise ArgumentError(f"no launch/{name}.sh in {cwd}: `realm launch copy` puts the scripts here first (they run "
                        "relative to the folder that holds launch/, as in a checkout)")  # fmt: skip


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        # note: as `realm` itself: asked-for help is output, a missing script name is a usage error
        print(f"usage:\n{USAGE}\n\nscripts: {', '.join(script_names(data_dir('launch')))}",
              file=sys.stdout if argv else sys.stderr)  # fmt: skip
        return 0 if argv else USER_ERROR_EXIT_CODE
    name, rest = argv[0], argv[1:]
    if name == "copy":
        if len(rest) > 1:
            raise ArgumentError(f"copy takes one folder, got {rest}")
        print(f"launch scripts in {copy_scripts(Path(rest[0] if rest else '.'))}")
        return 0
    script = find_script(name, Path.cwd())
    bash = shutil.which("bash")
    if bash is None:
        raise ArgumentError("the launch scripts need bash, which is not on PATH")
    os.execv(bash, [bash, str(script), *rest])
