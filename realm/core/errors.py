"""User errors: problems the person running a command can fix, reported as one line and exit code 2.

Every error of that kind derives from ``UserError``: a bad config or override (``ConfigError``), a malformed data
file (``DataFileError``), a missing or unreadable input (``MissingFileError``, ``InputError``), a run directory,
checkpoint or index that cannot be used (``RunError``, ``IndexVersionError``), a bad argument (``ArgumentError``), an
optional package the chosen setting needs (``MissingPackageError``), a full or read-only disk (``DiskError``). Its
message says what and where. ``run_command`` is the one place that turns them into ``PROG: error: MESSAGE`` on stderr
and exit code 2; every entry point (the ``realm`` command and each process's ``python -m``) goes through it. Anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import sys
from typing import Callable, Sequence

USER_ERROR_EXIT_CODE = 2


class UserError(Exception):
    """Base of the errors a user can fix; the message names what is wrong and where."""


class ConfigError(UserError, ValueError):
    """A config file or override that does not fit its schema (the message names the key path)."""


class DataFileError(UserError, ValueError):
    """A data file with a malformed record; the message names ``file:line``."""


class MissingFileError(UserError, FileNotFoundError):
    """An input file or folder that does not exist."""


class InputError(UserError, OSError):
    """An input that was named but cannot be read (a tokenizer, a checkpoint file, a hub name while offline)."""


class ArgumentError(UserError, ValueError):
    """A command-line argument that cannot be used."""


class RunError(UserError, RuntimeError):
    """A run directory or checkpoint that cannot be used."""


class MissingPackageError(UserError, ImportError):
    """An optional package the chosen setting needs is not installed; the message says what to install."""


class DiskError(UserError, OSError):
    """A write that failed for want of space or permission (a full disk or quota, a read-only or foreign folder);
    the message names the path and says that the run resumes once that is fixed (``realm.core.atomic.disk_writes``)."""


def run_command(prog: str, entry: Callable[[list[str]], int | None], argv: Sequence[str]) -> int:
    """``entry(argv)``'s exit code; a ``UserError`` (or a file the OS could not find) becomes one line and exit 2."""
    try:
        return int(entry(list(argv)) or 0)
    except (UserError, FileNotFoundError) as err:
        # note: a FileNotFoundError raised by the OS or a library (open, load_from_disk) is a missing input too
        # note: one write with its newline, not print (which writes the text and the newline apart): ranks share
        # one unbuffered stderr under accelerate, and two ranks' lines ran together between the two writes
        sys.stderr.write(f"{prog}: error: {err}\n")
        sys.stderr.flush()
        return USER_ERROR_EXIT_CODE
