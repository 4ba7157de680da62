"""When the trainer exports retriever weights for the builder, how stale an index it tolerates, and how it starts
its child builder (one process, or N under ``torch.distributed.run``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from realm.core.checks import Problems
from realm.core.precision import check_precision


@dataclass(kw_only=True, slots=True)
class RefreshConfig:
    """Trainer-side index refresh: exports, staleness bound, and the optional child builder."""

    refresh_interval: int = 500
    """Steps between retriever exports (REALM refreshes about every 500 steps)."""
    refresh_schedule: str = ""
    """Optional piecewise schedule overriding ``refresh_interval``, e.g. ``"0-1000:100,1000-:1000"``."""
    max_staleness: int = 1500
    """The trainer pauses only when its index is older than this many steps and a newer one is on its way."""
    poll_interval_s: float = 0.5
    """How often the background watcher looks for a newly published index."""
    spawn_builder: bool = False
    """Start ``realm.index_builder.watch`` as a child process (single-machine use); otherwise one runs separately."""
    builder_config: str = "configs/index/default.yaml"
    """Config file of the child builder."""
    builder_num_threads: int = 1
    """Intra-op threads of each child-builder process, so it does not starve the trainer of cores."""
    builder_num_processes: int = 1
    """Processes of the child builder; above 1 it runs under ``torch.distributed.run --standalone`` with
    ``--enable_distributed=true`` (one corpus shard per process, rank 0 publishes)."""
    builder_devices: str | int = ""
    """``CUDA_VISIBLE_DEVICES`` of the child builder, e.g. "7" or "6,7" (physical ids; the builder then runs with
    ``--device=cuda``); empty: inherit the trainer's and keep the builder config's device. (An int is accepted
    because ``--refresh.builder_devices=7`` parses as one; it is stored as a string.)"""
    builder_precision: str = ""
    """Embedding precision of the child builder ("fp32", "bf16", "fp16", "auto"); empty: the precision the
    trainer's ``train.precision`` resolved to. bf16 roughly doubles the refresh rate on GPUs, 1.4-1.8x on AVX-512
    BF16 CPUs (docs/performance.md; ``realm.index_builder.watch.IndexBuilderConfig.precision``)."""
    swap_lag: int = -1
    """-1: swap in each index version as soon as every process has loaded it (the fastest; which step a version goes
    live at then depends on how fast the builder runs, so two runs of one seed differ). ``k >= 0``: reproducible
    swaps: the version built from the export of step ``s`` goes live exactly before step ``s + k``; the trainer
    waits if it is late and holds it back if it is early, so the same seed searches the same index at every step.
    Must be below every export interval (the builder always builds the newest export, and a version must not be
    skipped); ``max_staleness`` is then unused."""
    initial_index_timeout_s: float = 600.0
    """How long to wait for an index (the first one, or one past ``max_staleness``) before giving up with an error,
    unless a builder is at work on the run: its heartbeat moves (``realm.index.builder_heartbeat``), since a build's
    time grows with the corpus (about 20 minutes for 1M blocks on 2 CPU cores, hours for 21M on one GPU)."""
    builder_restarts: int = 2
    """How many times the trainer restarts a child builder that died before it stops the run."""
    keep_exports: int = 3
    """Retriever exports kept in ``RUN/retriever/`` (older ones are pruned like checkpoints, so exports do not pile
    up when no builder consumes them; the builder only ever builds the newest)."""

    def __post_init__(self) -> None:
        problems = Problems()
        if self.refresh_interval <= 0:
            problems.add(f"refresh_interval must be positive, got {self.refresh_interval}")
        if self.keep_exports < 1:
            problems.add(f"keep_exports must be >= 1, got {self.keep_exports}")
        if self.max_staleness < 0:
            problems.add(f"max_staleness must be >= 0, got {self.max_staleness}")
        problems.check(check_precision, self.builder_precision, "builder_precision", allow_empty=True)
        if self.builder_num_processes < 1:
            problems.add(f"builder_num_processes must be >= 1, got {self.builder_num_processes}")
        self.builder_devices = str(self.builder_devices).replace(" ", "")
        devices = self.builder_devices.split(",") if self.builder_devices else []
        if any(not d for d in devices):
            problems.add(f"builder_devices must be comma-separated GPU ids, got {self.builder_devices!r}")
        if devices and self.builder_num_processes > len(devices):
            problems.add(
                f"builder_num_processes={self.builder_num_processes} needs as many builder_devices "
                f"(each process takes one GPU), got {self.builder_devices!r}"
            )
        if self.refresh_schedule or self.refresh_interval > 0:  # note: else refresh_interval's problem says it
            try:
                shortest = min(interval for _, _, interval in self.schedule().pieces)
            except ValueError as err:  # a malformed refresh_schedule
                problems.add(str(err))
            else:
                if not -1 <= self.swap_lag < shortest:
                    problems.add(
                        f"swap_lag must be -1 (swap when loaded) or in [0, {shortest}) (below the shortest export "
                        f"interval, so that no export is skipped), got {self.swap_lag}"
                    )
        problems.raise_if_any()

    def schedule(self, initial_only: bool = False) -> "RefreshSchedule":
        """When the trainer exports; ``initial_only`` (a frozen retriever, ``RetrieverConfig.frozen``): never after the
        initial export, whose index stays exact for the whole run, so no refresh is ever due or waited for."""
        if initial_only:
            return RefreshSchedule(())
        return RefreshSchedule.parse(self.refresh_schedule or f"0-:{self.refresh_interval}")








_PIECE = re.compile(r"^\s*(\d+)\s*-\s*(\d*)\s*:\s*(\d+)\s*$")


@dataclass(frozen=True, slots=True)
class RefreshSchedule:
    """Piecewise-constant export interval: ``[(start, end or None, interval), ...]`` sorted by start; no pieces:
    only the initial export."""

    pieces: tuple[tuple[int, int | None, int], ...]

    @classmethod
    def parse(cls, spec: str) -> "RefreshSchedule":
        pieces = []
        for part in spec.split(","):
            match = _PIECE.match(part)
            if not match:
                raise ValueError(f"refresh schedule piece {part!r} is not 'START-[END]:INTERVAL' (in {spec!r})")
            start, end, interval = int(match[1]), int(match[2]) if match[2] else None, int(match[3])
            if interval <= 0 or (end is not None and end <= start):
                raise ValueError(f"refresh schedule piece {part!r} needs END > START and INTERVAL > 0")
            pieces.append((start, end, interval))
        pieces.sort()
        for (s0, e0, _), (s1, _, _) in zip(pieces, pieces[1:]):
            if e0 is None or e0 > s1:
                raise ValueError(f"refresh schedule {spec!r} has overlapping pieces")
        return cls(tuple(pieces))

    def last_export(self, step: int) -> int:
        """The newest export at or before ``step``: on schedule, or the initial one at step 0."""
        if not self.pieces:  # note: no export after the initial one (and no scan back over every step)
            return 0
        return next((s for s in range(step, 0, -1) if self.is_due(s)), 0)

    def is_due(self, step: int) -> bool:
        """True when the weights after ``step`` optimizer steps should be exported."""
        for start, end, interval in self.pieces:
            if step >= start and (end is None or step < end):
                # step 0 is the initial export, made at start-up rather than on schedule
                return step > 0 and (step - start) % interval == 0
        return False
