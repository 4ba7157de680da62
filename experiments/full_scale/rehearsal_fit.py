"""What ``experiments/full_scale/rehearsal.py`` makes of its measurements: growth exponents, the projection to DPR's
21M passages on GPUs, and the markdown table of a rehearsal's JSON.

Growth exponent: the least-squares slope of log(figure) against log(N) over the corpus sizes run; 1 is linear, 0 is
flat (a bounded stage), 2 quadratic. Over two sizes it is the slope of the line through them.

Projection (``project``): from the GPU figures measured so far (docs/performance.md, "First figures on a lent GPU",
one H200, bf16, BERT-base) and this rehearsal's CPU FAISS build rate, the time of one index refresh over 21M blocks,
the trainer's step at REALM's global batch, and the days 100k steps take with the trainer waiting whenever a refresh
outlasts ``max_staleness`` steps (then every step costs refresh / max_staleness on average). Every assumption is a
named constant below, quoted in the output.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

DPR_PASSAGES = 21_015_324
"""Rows of DPR's psgs_w100.tsv (Wikipedia 2018-12-20)."""
BLOCKS_PER_PASSAGE = 1.0
"""A DPR passage is 100 words, ~130 BERT wordpieces: one 288-wordpiece block (blocks are cut per document)."""
GPU_STEP_S = 0.1291
"""REALM step, BERT-base bf16, 8 queries a GPU, K 5, blocks of 288, on one H200: the median of three single runs
(109.2, 129.1 and 180.9 ms, 2026-11-26 and -29; docs/performance.md), whose spread is ±40%."""
GPU_STEP_BATCH = 8
"""The batch that step time was measured at."""
GPU_BUILDER_BLOCKS_PER_S = 6245.0
"""The builder's embedding (``embed_blocks``), BERT-base bf16, blocks of 288, batches of 256, one H200, since its
loader packs from Arrow (docs/performance.md, "The builder kept up with the GPU": 6,245 blocks/s, 92% of a bare
forward; one run). Not the builder process's 1,008-1,546 blocks/s: those were over 8,000 blocks, much of it the
process's start-up, which a refresh of millions of blocks pays once."""
GLOBAL_BATCH = 512
"""REALM's global batch (configs/pretrain/base.yaml's paper setting)."""
MAX_STALENESS = 1500
"""Steps the trainer may run on an old index before it waits (configs/pretrain/base.yaml refresh.max_staleness)."""
DATA_PARALLEL_EFFICIENCY = 0.9
"""Assumed: the trainer's all-reduce over N-1 GPUs costs 10% of a step (not measured: no multi-GPU run yet)."""
BUILDER_SCALING_EFFICIENCY = 0.9
"""Assumed: a builder over several GPUs (BUILDER_NODES=all) embeds at 90% of linear (each rank its own shard)."""
GPU_HBM_BYTES_PER_S = 4.8e12
"""H200 memory bandwidth (vendor figure): exact search reads the fp16 index once per batch of queries."""
INDEX_DIM = 128
SEARCH_BYTES_PER_VALUE = 2
"""The trainer's exact GPU search keeps the index in fp16 (``realm.index.torch_search``)."""


def growth_exponent(sizes: Sequence[float], values: Sequence[float]) -> float | None:
    """Least-squares slope of log(value) on log(size); None with fewer than two distinct sizes or a value <= 0."""
    pairs = [(math.log(n), math.log(v)) for n, v in zip(sizes, values, strict=True) if n > 0 and v > 0]
    if len(pairs) < 2 or len(pairs) != len(sizes) or len({x for x, _ in pairs}) < 2:
        return None
    mean_x = sum(x for x, _ in pairs) / len(pairs)
    mean_y = sum(y for _, y in pairs) / len(pairs)
    num = sum((x - mean_x) * (y - mean_y) for x, y in pairs)
    den = sum((x - mean_x) ** 2 for x, _ in pairs)
    return num / den


@dataclass(kw_only=True, slots=True)
class Projection:
    """One GPU count's projected figures at DPR scale."""

    num_gpus: int
    factory: str
    """The index the FAISS build time was measured for."""
    builder_gpus: int
    trainer_gpus: int
    num_blocks: int
    embed_s: float
    """Embedding every block on the builder GPUs."""
    faiss_s: float
    """Building the FAISS index on the host from the embeddings (this rehearsal's CPU rate, linear in N)."""
    refresh_s: float
    step_s: float
    """One trainer step at the global batch, with the exact search over the whole index."""
    refresh_steps: float
    """Steps a refresh spans at the trainer's own pace (above ``MAX_STALENESS``, the trainer waits)."""
    effective_step_s: float
    """Seconds a step takes with the waits for the index spread over the steps."""
    wait_per_refresh_s: float
    """Seconds the trainer waits for each refresh."""
    days_per_100k_steps: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def project(num_gpus: int, faiss_s_per_block: float, *, factory: str = "Flat", builder_gpus: int = 1,
            num_passages: int = DPR_PASSAGES) -> Projection:  # fmt: skip
    """The refresh, step and wall-clock figures of a REALM run over ``num_passages`` on ``num_gpus`` GPUs, the
    builder on ``builder_gpus`` of them (launch/pretrain.sh's default: the last one) and the trainer on the rest.
    ``faiss_s_per_block``: this rehearsal's seconds a block to build the index on the host (0: not measured)."""
    if not 0 < builder_gpus < num_gpus:
        raise ValueError(f"builder_gpus must be between 1 and num_gpus - 1 = {num_gpus - 1}, got {builder_gpus}")
    blocks = int(num_passages * BLOCKS_PER_PASSAGE)
    builder_rate = GPU_BUILDER_BLOCKS_PER_S * builder_gpus * (BUILDER_SCALING_EFFICIENCY if builder_gpus > 1 else 1)
    embed_s = blocks / builder_rate
    faiss_s = blocks * faiss_s_per_block
    trainers = num_gpus - builder_gpus
    # note: a step's compute is linear in the per-GPU batch (gradient accumulation or a larger batch at the same MFU)
    per_gpu_batch = GLOBAL_BATCH / trainers
    compute_s = GPU_STEP_S * per_gpu_batch / GPU_STEP_BATCH / DATA_PARALLEL_EFFICIENCY
    search_s = blocks * INDEX_DIM * SEARCH_BYTES_PER_VALUE / GPU_HBM_BYTES_PER_S
    step_s = compute_s + search_s
    refresh_s = embed_s + faiss_s
    # note: builds run back to back from the newest export; the trainer may run max_staleness steps past the index
    # it searches, so when a build spans more steps than that the trainer waits, and each build's R seconds buy
    # max_staleness steps (exports land every refresh_interval steps: the build's start is rounded down to one, not
    # counted here)
    effective_step_s = max(step_s, refresh_s / MAX_STALENESS)
    wait = max(0.0, refresh_s - MAX_STALENESS * step_s)
    days = 100_000 * effective_step_s / 86_400
    return Projection(num_gpus=num_gpus, factory=factory, builder_gpus=builder_gpus, trainer_gpus=trainers,
                      num_blocks=blocks, embed_s=embed_s, faiss_s=faiss_s, refresh_s=refresh_s, step_s=step_s,
                      refresh_steps=refresh_s / step_s, effective_step_s=effective_step_s,
                      wait_per_refresh_s=wait, days_per_100k_steps=days)  # fmt: skip


ASSUMPTIONS = ("DPR_PASSAGES", "BLOCKS_PER_PASSAGE", "GPU_STEP_S", "GPU_STEP_BATCH", "GPU_BUILDER_BLOCKS_PER_S",
               "GLOBAL_BATCH", "MAX_STALENESS", "DATA_PARALLEL_EFFICIENCY",
               "BUILDER_SCALING_EFFICIENCY", "GPU_HBM_BYTES_PER_S", "SEARCH_BYTES_PER_VALUE")  # fmt: skip


def assumptions() -> dict[str, float]:
    return {name: globals()[name] for name in ASSUMPTIONS}


EXPONENTS = ("wall_exponent", "rss_exponent", "anon_exponent")


def _gb(num: float) -> str:
    return f"{num / (1 << 30):.2f}"


def markdown(result: dict[str, Any]) -> str:
    """The stage table (wall and peak RSS per N, exponents, bound) and the projection table of a rehearsal JSON."""
    sizes = result["passages"]
    head = ["stage", "cost", "shapes", *[f"wall s @{n:,}" for n in sizes], "wall exp",
            *[f"RSS / anon GB @{n:,}" for n in sizes], "RSS exp", "anon exp", f"bound GB @{sizes[-1]:,}"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, stage in result["stages"].items():
        runs = stage["runs"]
        walls = [f"{runs[str(n)]['wall_s']:.1f}" if str(n) in runs else "-" for n in sizes]
        peaks = [f"{_gb(runs[str(n)]['peak_rss_bytes'])} / {_gb(runs[str(n)].get('peak_anon_bytes', 0))}"
                 if str(n) in runs else "-" for n in sizes]  # fmt: skip
        exps = [f"{e:.2f}" if e is not None else "-" for e in (stage.get(key) for key in EXPONENTS)]
        last = runs.get(str(sizes[-1]), {})
        bound = _gb(last["bound_bytes"]) if "bound_bytes" in last else "-"
        note = f" ({stage['not_run']})" if stage.get("not_run") else ""
        lines.append(f"| {name}{note} | {stage['cost']} | {stage['shapes']} | " + " | ".join(
            [*walls, exps[0], *peaks, *exps[1:], bound]) + " |")  # fmt: skip
    out = "\n".join(lines)
    if result.get("projection"):
        rows = ["| GPUs (builder + trainer) | index | refresh (embed + FAISS) | step | refresh in steps "
                "| step with waits | days / 100k steps |", "|---|---|---|---|---|---|---|"]  # fmt: skip
        for p in result["projection"]:
            rows.append(f"| {p['num_gpus']} ({p['builder_gpus']} + {p['trainer_gpus']}) | {p['factory']} | "
                        f"{p['refresh_s'] / 60:.1f} min ({p['embed_s'] / 60:.1f} + {p['faiss_s'] / 60:.1f}) | "
                        f"{p['step_s'] * 1000:.0f} ms | {p['refresh_steps']:,.0f} | "
                        f"{p['effective_step_s'] * 1000:.0f} ms | {p['days_per_100k_steps']:.2f} |")  # fmt: skip
        named = ", ".join(f"{k} = {v:,}" for k, v in result.get("assumptions", {}).items())
        out += "\n\n" + "\n".join(rows) + f"\n\nAssumptions (experiments/full_scale/rehearsal_fit.py): {named}."
    return out
