"""Exact ``TorchIndex`` search at REALM's scale on random vectors, for ``experiments/full_scale/gpu_check.py``: QPS at
several query batch sizes, and recall against an exact fp32 reference.

The ``--rows`` x ``--dim`` unit vectors (default REALM's 13,353,718 x 128) are generated on the device a block at a
time from a seeded generator, so no [N, D] matrix is ever held on the host: ``TorchIndex`` copies them into its fp16
matrix a slice at a time (as it does from a memory-mapped file), and the fp32 reference regenerates each block on the
device and keeps a running top k. Queries are ``--queries`` rows plus noise, so each also knows the row it came from.
Figures: index setup seconds and device memory, per batch size the median search time over ``--rounds`` and QPS,
recall@k and top-1 agreement of the index against the fp32 reference, the share of queries whose own row comes first,
and the time projected linearly to 13,353,718 rows. Run from the repository root::

    python -m experiments.full_scale.gpu_check_search --device cuda --json runs/gpu_check/search.json
    python -m experiments.full_scale.gpu_check_search --rows 20000 --dim 32 --batches 1 8 --json /tmp/s.json  # CPU
"""

from __future__ import annotations

import argparse
import statistics
import time

from benchmarks.harness import emit  # isort:skip  (first: no hub, no W&B)
import numpy as np
import torch
from benchmarks.flops import device_time

from realm.index.torch_search import TorchIndex

REALM_ROWS = 13_353_718
BLOCK_ROWS = 1 << 16
"""Rows generated from one seed: any slice is the concatenation of whole blocks, so it reads the same each time."""


class RandomRows:
    """[rows, dim] random unit vectors, generated on ``device`` a ``BLOCK_ROWS`` block at a time (block b from seed
    ``seed + b``), read by slices like a memory-mapped array: what ``TorchIndex`` copies from."""

    def __init__(self, rows: int, dim: int, device: torch.device, seed: int = 0) -> None:
        self.shape, self.ndim, self.device, self.seed = (rows, dim), 2, device, seed

    def block(self, b: int) -> torch.Tensor:
        """Block ``b`` as fp32 on the device."""
        n = min(BLOCK_ROWS, self.shape[0] - b * BLOCK_ROWS)
        gen = torch.Generator(self.device).manual_seed(self.seed + b)
        rows = torch.randn(n, self.shape[1], generator=gen, device=self.device)
        return rows / rows.norm(dim=1, keepdim=True)

    def rows(self, start: int, stop: int) -> torch.Tensor:
        """Rows ``start:stop`` as fp32 on the device."""
        first, last = start // BLOCK_ROWS, (stop - 1) // BLOCK_ROWS
        joined = torch.cat([self.block(b) for b in range(first, last + 1)])
        return joined[start - first * BLOCK_ROWS : stop - first * BLOCK_ROWS]

    def __getitem__(self, item: slice) -> np.ndarray:
        start, stop, step = item.indices(self.shape[0])
        if step != 1 or stop <= start:
            raise ValueError(f"RandomRows reads contiguous slices only, got {item}")
        return self.rows(start, stop).cpu().numpy()


def exact_top(source: RandomRows, queries: torch.Tensor, k: int) -> torch.Tensor:
    """[Q, k] ids of the fp32 inner-product top k over every row: the reference, computed block by block."""
    best_scores = torch.full((len(queries), 0), float("-inf"), device=queries.device)
    best_ids = torch.zeros((len(queries), 0), dtype=torch.int64, device=queries.device)
    for b in range(-(-source.shape[0] // BLOCK_ROWS)):
        scores = queries @ source.block(b).T
        top = scores.topk(min(k, scores.shape[1]), dim=1)
        best_scores = torch.cat([best_scores, top.values], 1)
        best_ids = torch.cat([best_ids, top.indices + b * BLOCK_ROWS], 1)
        keep = best_scores.topk(min(k, best_scores.shape[1]), dim=1)
        best_scores, best_ids = keep.values, best_ids.gather(1, keep.indices)
    return best_ids


def measure(args: argparse.Namespace) -> dict:
    device = torch.device(args.device)
    source = RandomRows(args.rows, args.dim, device, args.seed)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    started = device_time(device)
    index = TorchIndex(source, [device], dtype=args.dtype)
    setup_s = device_time(device) - started
    gen = torch.Generator().manual_seed(args.seed)
    origin = torch.randperm(args.rows, generator=gen)[: max(args.batches)]
    queries = torch.stack([source.rows(int(i), int(i) + 1)[0] for i in origin])
    queries = queries + 0.05 * torch.randn(queries.shape, generator=gen).to(device)
    batches = {}
    for q in args.batches:
        index.search(queries[:q], args.k)  # warm-up of this shape's kernels
        times = []
        for _ in range(args.rounds):
            t0 = device_time(device)
            index.search(queries[:q], args.k)
            times.append(device_time(device) - t0)
        median = statistics.median(times)
        batches[str(q)] = {"ms": 1e3 * median, "qps": q / median,
                           "projected_realm_ms": 1e3 * median * REALM_ROWS / args.rows}  # fmt: skip
    _, ids = index.search(queries, args.k)
    reference = exact_top(source, queries, args.k)
    hits = [len(set(a.tolist()) & set(b.tolist())) / args.k for a, b in zip(ids.cpu(), reference.cpu())]
    return {
        "rows": args.rows, "dim": args.dim, "dtype": args.dtype, "k": args.k, "device": str(device),
        "setup_s": setup_s,
        "device_memory_gb": torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else None,
        "batches": batches,
        "recall_at_k_vs_exact_fp32": statistics.mean(hits),
        "top1_agrees_with_exact_fp32": (ids[:, 0].cpu() == reference[:, 0].cpu()).float().mean().item(),
        "own_row_first": (ids[:, 0].cpu() == origin).float().mean().item(),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=REALM_ROWS)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--dtype", default="fp16", help="the index matrix: fp16 | bf16 | fp32")
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 64, 512], help="query batch sizes timed")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    started = time.perf_counter()
    result = measure(args)
    result["wall_s"] = time.perf_counter() - started
    lines = [f"{args.rows:,} x {args.dim} {args.dtype} on {result['device']}: setup {result['setup_s']:.1f} s, "
             f"recall@{args.k} vs exact fp32 {result['recall_at_k_vs_exact_fp32']:.4f}, "
             f"own row first {result['own_row_first']:.3f}"]  # fmt: skip
    lines += [f"  Q {q:>5}: {r['ms']:9.2f} ms, {r['qps']:12,.0f} queries/s" for q, r in result["batches"].items()]
    emit(result, "\n".join(lines), args.json)
    return result


if __name__ == "__main__":
    main()
