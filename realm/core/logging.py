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
from pathlib import Path
from typing import Any, Mapping

import torch

_FORMAT = "%(asctime)s [realm %(name)s] %(levelname)s %(message)s"


def init_logging(is_main_process: bool = True, level: int = logging.INFO) -> None:
    """Configures stdlib logging once; non-main ranks only report warnings so logs are not N-fold."""
    root = logging.getLogger()
    if not any(getattr(h, "_realm", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(_FORMAT, datefmt="%H:%M:%S"))
        handler._realm = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    root.setLevel(level if is_main_process else logging.WARNING)
    for noisy in ("datasets", "filelock", "urllib3", "httpx", "transformers.modeling_utils"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _plain(value: Any) -> Any:
    # note: .item() is a device-to-host sync; the loop only calls log() at log intervals.
    if isinstance(value, torch.Tensor):
        return value.detach().float().item()
    return value


class MetricsLogger:
    """Appends ``{"step": n, **metrics}`` lines to a jsonl file and forwards them to accelerate's trackers."""

    def __init__(self, path: str | Path | None, accelerator: Any = None) -> None:
        self.path = Path(path) if path else None
        self.accelerator = accelerator
        self._file = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a", encoding="utf-8")

    def log(self, metrics: Mapping[str, Any], step: int) -> dict[str, Any]:
        plain = {k: _plain(v) for k, v in metrics.items()}
        if self._file is not None:
            self._file.write(json.dumps({"step": step, **plain}) + "\n")
            self._file.flush()
        if self.accelerator is not None and self.accelerator.trackers:
            self.accelerator.log(plain, step=step)
        return plain

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


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
