"""Wall seconds and peak memory of one command run as its own process tree (``experiments/full_scale/rehearsal.py``'s
stages).

Peak RSS is the largest sum of the resident sets of the command and every descendant seen at once (psutil, polled
every ``POLL_S``): a stage that forks tagging workers or spawns the index builder is charged for all of them
together, as the machine must hold them together. Polling can miss a spike shorter than ``POLL_S``; the kernel's
``ru_maxrss`` of waited-for children is no remedy here, since a child forked from this process starts with this
process's resident pages (torch and datasets imported: ~0.45 GB) and its maximum then counts them.

Resident memory counts the pages of memory-mapped files a process has touched (the blocks' Arrow files, an index's
embeddings memmap), which the kernel can drop and read again under pressure. The anonymous part (resident minus
file-backed and shared pages: what would go to swap) is what a stage cannot give back, so it is polled too and is
what the bounds of ``experiments/full_scale/rehearsal_stages.py`` are checked against; both are reported.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import psutil

POLL_S = 0.2
"""Seconds between looks at the process tree's resident memory."""
LOG_TAIL_LINES = 25


class StageFailed(RuntimeError):
    """A stage's command exited non-zero; the message quotes the end of its log."""


@dataclass(kw_only=True, slots=True)
class Measured:
    """What one command cost."""

    wall_s: float
    """Seconds from start to exit."""
    peak_rss_bytes: int
    """Largest polled sum of the tree's resident memory."""
    peak_anon_bytes: int
    """Largest polled sum over the tree of resident memory not backed by a file (RSS minus shared pages)."""
    max_processes: int
    """Most processes of the tree alive at one poll."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _tree_rss(proc: psutil.Process) -> tuple[int, int, int]:
    """(summed RSS, summed anonymous RSS, number of processes) of ``proc`` and its descendants; vanished processes
    count nothing."""
    total, anon, count = 0, 0, 0
    try:
        members = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0, 0, 0
    for member in members:
        try:
            info = member.memory_info()
        except psutil.Error:
            continue
        # note: on Linux ``shared`` is RssFile + RssShmem, so the rest is the process's anonymous memory
        total, anon, count = total + info.rss, anon + info.rss - getattr(info, "shared", 0), count + 1
    return total, anon, count


def measure(argv: Sequence[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> Measured:
    """Runs ``argv`` with its output going to ``log`` and returns its wall time and peak memory; a non-zero exit
    raises ``StageFailed`` with the end of the log."""
    log.parent.mkdir(parents=True, exist_ok=True)
    peak_tree, peak_anon, max_processes = 0, 0, 0
    start = time.perf_counter()
    with log.open("w", encoding="utf-8") as out:
        child = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        watched = psutil.Process(child.pid)
        while child.poll() is None:
            rss, anon, count = _tree_rss(watched)
            peak_tree, peak_anon, max_processes = max(peak_tree, rss), max(peak_anon, anon), max(max_processes, count)
            time.sleep(POLL_S)
    wall = time.perf_counter() - start
    if child.returncode != 0:
        tail = "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-LOG_TAIL_LINES:])
        raise StageFailed(f"{' '.join(argv)} failed (exit code {child.returncode}); end of {log}:\n{tail}")
    return Measured(wall_s=round(wall, 2), peak_rss_bytes=peak_tree, peak_anon_bytes=peak_anon,
                    max_processes=max_processes)


def offline_env(threads: int) -> dict[str, str]:
    """This process's environment with no hub or W&B network and ``threads`` OpenMP/MKL threads per process."""
    return os.environ | {
        "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "disabled",
        "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
    }  # fmt: skip
