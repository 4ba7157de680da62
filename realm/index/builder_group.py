"""The builder's processes: one (the default) or N started by a launcher, joined through accelerate.

    torchrun --standalone --nproc_per_node 2 -m realm.index_builder.watch --config C --run_dir RUN \
        --enable_distributed=true
    ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no \
        --dynamo_backend no -m realm.index_builder.watch --config C --run_dir RUN --enable_distributed=true

Ranks exchange only small control messages (what to build, each shard's report, the build's outcome); the
embeddings travel through files. Those messages go over a **gloo** group even when the default group is NCCL: gloo
waits on the CPU with the configured timeout, so a rank waiting for a slow or dead peer fails loudly instead of
hanging, and no GPU memory or stream is involved. The group is never torn down explicitly: a builder process of an
N-process run ends through ``realm.core.process_exit`` (tearing a gloo group down can hang).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from realm.index.embedding import BuildCancelled

logger = logging.getLogger(__name__)


class PeerError(RuntimeError):
    """Raised on the other ranks when one rank's part of a collective step failed; names the rank and its error."""


@dataclass(slots=True)
class BuilderGroup:
    """Rank, world size and device of this builder process, and the collectives its loop needs."""

    rank: int = 0
    world_size: int = 1
    device: torch.device | None = None
    """The rank's device when joined ("cuda" gives each rank its local GPU); None for the single process."""
    group: Any = None
    """Process group of the control messages (None: the single process, nothing to exchange)."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def join(cls, device: str, timeout_s: float) -> BuilderGroup:
        """Joins the process group the launcher set up (torchrun / accelerate launch), or runs alone without one.

        ``device`` is "cpu" (every rank on CPU, gloo) or "cuda" (rank r on its local GPU ``r``; choose the builder's
        GPUs with ``CUDA_VISIBLE_DEVICES``). ``timeout_s`` bounds every wait for a peer.
        """
        from accelerate import PartialState

        timeout = datetime.timedelta(seconds=timeout_s)
        state = PartialState(cpu=device == "cpu", timeout=timeout)
        if state.num_processes == 1:
            return cls(device=state.device)
        group = dist.group.WORLD if dist.get_backend() == "gloo" else dist.new_group(backend="gloo", timeout=timeout)
        return cls(rank=state.process_index, world_size=state.num_processes, device=state.device, group=group)

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if self.group is None:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    def all_gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order, on every rank."""
        if self.group is None:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def from_main(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` run on rank 0, its (picklable) result returned on every rank.

        If ``fn`` raises, rank 0 re-raises it and every other rank raises ``PeerError`` (``BuildCancelled`` for a
        cancellation), so no rank is left waiting for a peer that has given up.
        """
        error: BaseException | None = None
        message: tuple[str, Any] = ("ok", None)
        if self.is_main:
            try:
                message = ("ok", fn())
            except BaseException as err:  # note: KeyboardInterrupt too; the peers must hear about it
                error = err
                kind = "cancelled" if isinstance(err, BuildCancelled) else "error"
                message = (kind, f"{type(err).__name__}: {err}")
        kind, payload = self.broadcast(message)
        if error is not None:
            raise error
        if kind == "cancelled":
            raise BuildCancelled(f"rank 0: {payload}")
        if kind == "error":
            raise PeerError(f"rank 0 failed: {payload}")
        return payload


def shard_report(rank: int, compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """This rank's report of its shard: ``{"status": "ok", **compute()}``, or cancelled (``BuildCancelled``), or
    failed with the error; never raises, so every rank reaches the all-gather that follows."""
    try:
        return {"status": "ok", **compute()}
    except BuildCancelled as err:
        return {"status": "cancelled", "message": str(err)}
    except Exception as err:
        logger.exception("rank %d: its shard failed", rank)
        return {"status": "failed", "message": f"{type(err).__name__}: {err}"}


def check_reports(reports: list[dict[str, Any]]) -> None:
    """Rank 0, after the all-gather: raises ``PeerError`` naming every failed rank, or ``BuildCancelled`` when a
    rank was stopped; nothing is published then, and finished shards stay for the next run."""
    failed = [f"rank {r}: {rep['message']}" for r, rep in enumerate(reports) if rep["status"] == "failed"]
    if failed:
        raise PeerError("shard(s) failed, nothing published: " + "; ".join(failed))
    if any(rep["status"] == "cancelled" for rep in reports):
        raise BuildCancelled("a rank was stopped; finished shards are kept for the next run")
