"""Exact MIPS latency: the torch index (``realm.index.torch_search``, what GPU search uses without faiss-gpu) against
exact FAISS (``Flat``) on the same embeddings and queries, in one run, and the projected latency at REALM's scale.

Measures a slice of ``--rows`` random unit vectors of ``--dim`` (REALM: 13,353,718 x 128) searched by ``--queries``
queries for the top ``--k``: the median over ``--rounds`` of each index's search time, their ratio, a parity check
(the same ids), and the time projected linearly to ``--full-rows`` (exact search is one pass over the matrix, so its
time grows with N). On a GPU (``--device cuda``, fp16 matrix, ``--shards`` = GPUs used) FAISS stays on the CPU, the
peer a trainer without faiss-gpu would otherwise have. Run from the repository root::

    python -m benchmarks.search [--rows 1000000] [--queries 64] [--threads 2] [--json PATH]
    python -m benchmarks.search --device cuda --dtype fp16 --rows 13353718 --queries 512    # a whole REALM index on a GPU
"""

from __future__ import annotations

import argparse
import statistics
import time

from benchmarks.harness import write_json  # isort:skip  (first: no hub, no W&B)
import numpy as np  # noqa: E402
import torch  # noqa: E402

from realm.index.mips import FaissIndex, IndexConfig  # noqa: E402
from realm.index.torch_search import TorchIndex  # noqa: E402


def _time(fn, rounds: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(rounds):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--queries", type=int, default=64)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--shards", type=int, default=1, help="devices the torch index is split over")
    parser.add_argument("--dtype", default="fp32", help="fp32 | fp16 | bf16 (the torch index's matrix)")
    parser.add_argument("--full-rows", type=int, default=13_353_718)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    embeddings = rng.standard_normal((args.rows, args.dim), dtype=np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    queries = torch.from_numpy(embeddings[rng.choice(args.rows, args.queries, replace=False)] + 0.05)
    devices = [args.device if args.device == "cpu" else f"cuda:{i}" for i in range(args.shards)]
    started = time.perf_counter()
    faiss_index = FaissIndex.build(embeddings, IndexConfig(factory="Flat"))
    torch_index = TorchIndex(embeddings, devices, dtype=args.dtype)
    build_s = time.perf_counter() - started
    on_device = queries.to(devices[0])
    faiss_s, (_, faiss_ids) = _time(lambda: faiss_index.search(queries, args.k), args.rounds)
    torch_s, (_, torch_ids) = _time(lambda: torch_index.search(on_device, args.k), args.rounds)
    same = (torch_ids.cpu() == faiss_ids).float().mean().item()
    scale = args.full_rows / args.rows
    result = {
        "rows": args.rows, "dim": args.dim, "queries": args.queries, "k": args.k, "device": args.device,
        "shards": args.shards, "dtype": args.dtype, "faiss_flat_ms": round(faiss_s * 1e3, 2),
        "torch_ms": round(torch_s * 1e3, 2), "torch_over_faiss": round(torch_s / faiss_s, 3),
        "same_ids": round(same, 4), "projected_full_faiss_ms": round(faiss_s * scale * 1e3, 1),
        "projected_full_torch_ms": round(torch_s * scale * 1e3, 1), "setup_s": round(build_s, 1),
    }  # fmt: skip
    width = max(map(len, result))
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    write_json(args.json, result)


if __name__ == "__main__":
    main()
