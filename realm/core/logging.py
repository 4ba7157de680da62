"""One logging setup and one metrics sink for every process.

Metrics are namespaced (``train/loss``, ``index/staleness``, ``time/step_s``) and always appended to
``RUN/metrics.jsonl`` (so runs can be inspected without any tracker); trackers configured in accelerate receive the
same dicts through ``accelerator.log``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, Mapping

import torch

from realm.core.atomic import disk_writes, write_text_atomic
from realm.core.log_noise import ExpectedNoiseFilter, quiet_third_party

_FORMAT = "%(asctime)s [realm %(name)s] %(levelname)s %(message)s"


class _CurrentStderrHandler(logging.StreamHandler):
    """A stream handler that writes to whatever ``sys.stderr`` is when a record is emitted, not the one it was made
    with: a caller that swaps stderr after ``init_logging`` (``contextlib.redirect_stderr``, pytest's capture) would
    otherwise leave the handler writing to a closed stream, and every later record, from any thread, turns into a
    "Logging error" traceback."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass  # note: StreamHandler.__init__ assigns it; the property always answers the current stderr


def init_logging(is_main_process: bool = True, level: int = logging.INFO) -> None:
    """Configures stdlib logging once; non-main ranks only report warnings so logs are not N-fold. Unless
    ``--verbose`` (``realm.core.log_noise``), third-party progress bars and expected third-party events are quiet."""
    root = logging.getLogger()
    if not any(getattr(h, "_realm", False) for h in root.handlers):
        handler = _CurrentStderrHandler()
        handler.setFormatter(logging.Formatter(_FORMAT, datefmt="%H:%M:%S"))
        handler.addFilter(ExpectedNoiseFilter())
        handler._realm = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    quiet_third_party()
    root.setLevel(level if is_main_process else logging.WARNING)
    for noisy in ("datasets", "filelock", "urllib3", "httpx", "transformers.modeling_utils"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _plain(value: Any) -> Any:
    # note: .item() is a device-to-host sync; the loop only calls log() at log intervals.
    if isinstance(value, torch.Tensor):
        return value.detach().float().item()
    return value


class MetricsLogger:
    """Appends ``{"step": n, **metrics}`` lines to a jsonl file and forwards them to accelerate's trackers.

    Each record is one ``write`` of a whole line to a file opened for appending, so a kill can tear at most the last
    line; a torn tail found when the file is opened is cut off (with a warning) rather than glued to the next record.
    """

    def __init__(self, path: str | Path | None, accelerator: Any = None) -> None:
        self.path = Path(path) if path else None
        self.accelerator = accelerator
        self._fd: int | None = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _cut_torn_tail(self.path)
            with disk_writes(self.path):
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def log(self, metrics: Mapping[str, Any], step: int) -> dict[str, Any]:
        plain = {k: _plain(v) for k, v in metrics.items()}
        if self._fd is not None:
            with disk_writes(self.path):  # note: a record cut short by a full disk is a torn tail, cut at the next open
                os.write(self._fd, (json.dumps({"step": step, **plain}) + "\n").encode())
        if self.accelerator is not None and self.accelerator.trackers:
            self.accelerator.log(plain, step=step)
        return plain

    def drop_after(self, step: int) -> int:
        """Removes the records of steps after ``step`` (what a killed run logged past the checkpoint a resumed run
        starts from, which the resumed run logs again); returns how many were removed."""
        if self.path is None or not self.path.is_file():
            return 0
        lines = self.path.read_text(encoding="utf-8").splitlines(keepends=True)
        kept = [line for line in lines if (found := _record_step(line)) is not None and found <= step]
        if len(kept) < len(lines):
            write_text_atomic(self.path, "".join(kept))
            os.close(self._fd)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            logging.getLogger(__name__).info(
                "%s: removed %d record(s) after step %d (logged again by this run)", self.path, len(lines) - len(kept), step
            )
        return len(lines) - len(kept)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def cut_log(path: str | Path, size: int) -> int:
    """Truncates the append-only log ``path`` to its first ``size`` bytes, the size a checkpoint recorded, and
    returns how many lines were removed: what a killed run appended after the checkpoint a resumed run starts from
    (records of later steps, and those of the checkpoint's own step logged after it was saved, such as a final
    evaluation), which the resumed run appends again. A file shorter than ``size`` is left as it is."""
    path = Path(path)
    if not path.is_file() or path.stat().st_size <= size:
        return 0
    with open(path, "r+b") as f:
        f.seek(size)
        removed = f.read().count(b"\n")
        f.truncate(size)
        f.flush()
        os.fsync(f.fileno())
    logging.getLogger(__name__).info("%s: removed %d line(s) written after the checkpoint", path, removed)
    return removed


def _record_step(line: str) -> int | None:
    try:
        return int(json.loads(line).get("step", 0))
    except (ValueError, TypeError, AttributeError):
        return None


def _cut_torn_tail(path: Path) -> None:
    """Truncates a last line that a kill left without its newline (or that does not parse)."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    tail = data[end:]
    if tail:
        with open(path, "r+b") as f:
            f.truncate(end)
        logging.getLogger(__name__).warning("%s: cut a torn last line (%d bytes) left by a killed run", path, len(tail))


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """All records of a metrics.jsonl file (a torn last line from a killed run is ignored)."""
    records = []
    path = Path(path)
    if not path.is_file():
        return records
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def progress(total: int | None, desc: str, unit: str = "it", initial: int = 0, enabled: bool = True):
    """A tqdm bar with rate and ETA on a terminal; silent when stderr is not a TTY (CI, log files)."""
    from tqdm.auto import tqdm

    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        initial=initial,
        dynamic_ncols=True,
        mininterval=1.0,
        disable=None if enabled else True,
        leave=False,
    )


def set_num_threads(num_threads: int) -> None:
    """Caps intra-op threads (0 leaves torch's default); the trainer and builder share 2 cores in the demo."""
    if num_threads > 0:
        torch.set_num_threads(num_threads)
        os.environ.setdefault("OMP_NUM_THREADS", str(num_threads))


def eta(step: int, total: int, start: tuple[float, int]) -> str:
    """``"ETA 3m12s"`` for a job at ``step`` of ``total`` steps, at the pace of this invocation: ``start`` is
    ``(time.perf_counter(), step)`` when it began (a resumed job counts from its resumed step). ``""`` before its first
    step here or at its last, so a step line reads ``step 100/1600 ... ETA 3m12s``."""
    started, first = start
    done = step - first
    if done <= 0 or step >= total:
        return ""
    seconds = round((time.perf_counter() - started) / done * (total - step))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"ETA {hours}h{minutes:02d}m" if hours else f"ETA {minutes}m{secs:02d}s" if minutes else f"ETA {secs}s"
