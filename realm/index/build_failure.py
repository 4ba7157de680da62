"""A failed index build: retried with backoff while retrying may help, else given up with its reason recorded in the
run, where the trainer reads it.

A build fails for a moment (the disk is full until the trainer prunes a checkpoint, a file system hiccups) or for
good (a token id past the vocabulary, a corrupt export, a bug). ``FailedBuild.after`` decides: an ``OSError`` (a
``DiskError`` included) or a ``MemoryError`` is retried up to ``build_retries`` times, waiting ``retry_backoff_s``
and then twice as long each time; anything else, or the last retry failing too, gives up. A builder that gives up
writes ``RUN/index/BUILD_FAILED`` (``record_build_failure``: JSON, atomically, so the trainer never reads half of it)
and exits with the reason on one line (``IndexBuildError``). The trainer, waiting for an index, stops at once with
that reason, whether the builder is its child or runs standalone (``builder_gave_up``: a record older than the
trainer is one the user has since dealt with). A builder that starts removes the record.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from realm.core.atomic import write_text_atomic
from realm.core.errors import DiskError, RunError, UserError
from realm.run.layout import BUILD_FAILED, index_dir


class IndexBuildError(RunError):
    """The index builder gave up on a build; the message is its reason (what failed, for which export, how often)."""


def _retryable(err: BaseException) -> bool:
    """Whether trying again may help: the environment (space, memory, the file system), not the input or the code."""
    if isinstance(err, UserError):
        return isinstance(err, DiskError)
    return isinstance(err, (OSError, MemoryError))


def _describe(err: BaseException) -> str:
    # note: a user error's message says what and where on its own; anything else is named by its type
    return str(err) if isinstance(err, UserError) else f"{type(err).__name__}: {err}"


@dataclass(frozen=True, slots=True)
class FailedBuild:
    """The latest failure of building the index of one retriever export."""

    step: int
    """The export's retriever step."""
    attempts: int
    """Attempts made so far, all failed."""
    reason: str
    """What went wrong, on one line."""
    give_up: bool
    """No attempt is left, or retrying cannot help."""
    retry_at: float
    """``time.monotonic()`` after which the next attempt may start."""

    @staticmethod
    def after(
        previous: FailedBuild | None, step: int, err: BaseException, retries: int, backoff_s: float
    ) -> FailedBuild:
        """The failure after an attempt at ``step`` failed with ``err``; ``previous``: the one before it (its attempts
        count when it was at the same step), ``retries`` and ``backoff_s``: the builder's ``build_retries`` and
        ``retry_backoff_s``."""
        attempts = previous.attempts + 1 if previous is not None and previous.step == step else 1
        retryable = _retryable(err)
        give_up = not retryable or attempts > retries
        why = "" if retryable else " (retrying cannot fix it)"
        plural = "s" if attempts > 1 else ""
        reason = (
            f"gave up building the index of retriever step {step} after {attempts} attempt{plural}{why}: "
            f"{_describe(err)}"
        )
        retry_at = time.monotonic() + backoff_s * 2 ** (attempts - 1)
        return FailedBuild(step=step, attempts=attempts, reason=reason, give_up=give_up, retry_at=retry_at)


def record_build_failure(run_dir: str | Path, step: int, reason: str) -> None:
    """Writes why the builder gave up on ``step`` to ``RUN/index/BUILD_FAILED`` (atomically: temp name + rename)."""
    record = {"step": step, "reason": reason, "time": time.time()}
    index_dir(run_dir).mkdir(parents=True, exist_ok=True)
    write_text_atomic(index_dir(run_dir) / BUILD_FAILED, json.dumps(record) + "\n")


def clear_build_failure(run_dir: str | Path) -> None:
    """Removes the record of an earlier builder that gave up (a builder that starts tries again)."""
    (index_dir(run_dir) / BUILD_FAILED).unlink(missing_ok=True)


def builder_gave_up(run_dir: str | Path, since: float) -> str | None:
    """What the trainer reports when the run's builder gave up at ``time.time()`` >= ``since`` ("the index builder
    gave up building ...", its recorded reason), else None."""
    try:
        record = json.loads((index_dir(run_dir) / BUILD_FAILED).read_text())
        written, reason = float(record["time"]), str(record["reason"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # note: none, or not one of ours (the record is replaced whole, so never half written)
    return f"the index builder {reason}" if written >= since else None
