"""What a pre-training invocation reports when it ends: the JSON ``realm train`` prints last (pipelines and tests read
it, ``tests.helpers.last_json``), from the run's totals across its invocations (``RunTotals``)."""

from __future__ import annotations

from realm.trainer.index_sync import RunTotals


def run_summary(
    totals: RunTotals, *, step: int, world_size: int, global_batch_size: int, final_index_version: int | None
) -> dict:
    """The summary of a run at ``step``; the wait fractions are shares of the whole run's wall time."""
    return {
        "step": step,
        "world_size": world_size,
        "global_batch_size": global_batch_size,
        "wall_seconds": totals.wall_s,
        "num_index_refreshes": totals.num_index_refreshes,
        "trainer_wait_fraction": totals.index_wait_s / totals.wall_s if totals.wall_s else 0.0,
        "refresh_wait_fraction": totals.refresh_wait_s / totals.wall_s if totals.wall_s else 0.0,
        "index_wait_seconds": totals.index_wait_s,
        "final_index_version": final_index_version,
        "num_retriever_exports": totals.num_exports,
    }
