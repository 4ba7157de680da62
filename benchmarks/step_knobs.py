"""What each of the REALM step's cost knobs costs: the slots read (k), the query and block lengths, and the refresh
interval against the builder's time per refresh.

Measured in one run on one machine, at a base shape (the shape flags of ``benchmarks/step.py``; MiniLM's in the command
below) and in each ``--precisions``:

- the REALM step (``benchmarks/timed_steps.RealmStep``: search embedding, search and packing, forward + backward, clip
  and AdamW) at the base shape and with one knob changed at a time: ``--candidates`` (slots, the null document
  included), ``--block-lens`` (wordpieces of a block: the reader reads query + block, the document tower embeds the
  block) and ``--query-lens``; each row's step time and its ratio to the base row of its precision;
- the builder's embedding throughput at each block length (``embed_blocks`` over random blocks, one thread: the
  trainer's child builder runs beside it), and from it, for a corpus of ``--corpus-blocks`` blocks, the seconds of one
  refresh and the refresh interval at which the trainer stops waiting: with ``refresh.max_staleness`` at the
  interval, a refresh must finish within ``interval x step time``, so intervals below ``refresh s / step s`` leave the
  trainer waiting ``refresh s - interval x step s`` per refresh. This is arithmetic on the measured figures (the
  builder and trainer share the cores on a 2-core machine, which the measured step does not include).

Run from the repository root, nothing else on the cores (about 6 minutes on 2 cores):
``python -m benchmarks.step_knobs --hidden 384 --layers 6 --heads 12 --intermediate 1536 --vocab 30522 --batch 8
--block-len 128 --body-len 120 --steps 3 --warmup 1 --corpus-blocks 13000 --json runs/knobs.json``.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
from pathlib import Path

from benchmarks.harness import emit  # isort:skip  (first: no hub, no W&B)
import datasets
import numpy as np
import torch
from benchmarks.flops import device_time
from benchmarks.step import precisions
from benchmarks.timed_steps import RealmStep, bert_config, reader_length, shape_parser

from realm.core.logging import set_num_threads
from realm.core.precision import DTYPES, set_kernels
from realm.data.blocks import BLOCK_FEATURES
from realm.data.packing import SpecialIds
from realm.index.embedding import embed_blocks
from realm.models.retriever import Retriever, RetrieverConfig

SPECIAL = SpecialIds(cls=2, sep=3, pad=0, mask=4)


def knob_args(base: argparse.Namespace, knob: str, value: int) -> argparse.Namespace:
    """``base`` with one knob changed (a block length changes the body length with it)."""
    args = copy.copy(base)
    if knob == "candidates":
        args.candidates = value
    elif knob == "block_len":
        args.block_len, args.body_len = value, max(1, value - (base.block_len - base.body_len))
    elif knob == "query_len":
        args.query_len = value
    return args


def time_step(args: argparse.Namespace, precision: str, device: torch.device) -> float:
    """The median seconds of the REALM step at ``args``' shape in ``precision``."""
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
    step = RealmStep(args, bert_config(args, reader_length(args)), device, autocast)
    set_kernels(step.model, device.type, precision, reader_length(args))
    times = [step()[0]["step"] for _ in range(args.warmup + args.steps)]
    return statistics.median(times[args.warmup :])


def builder_blocks_per_s(args: argparse.Namespace, block_len: int, precision: str, work: Path) -> float:
    """Blocks/s of ``embed_blocks`` (one thread, as the trainer's child builder) over random blocks of ``block_len``
    wordpieces, the document tower cast to ``precision`` as the builder casts it."""
    rng = np.random.default_rng(0)
    n = args.builder_blocks
    body = max(1, block_len - 6)
    blocks = datasets.Dataset.from_dict(
        {
            "doc_id": [str(i) for i in range(n)],
            "uid": [str(i) for i in range(n)],
            "title": ["t"] * n,
            "text": ["x"] * n,
            "title_ids": [rng.integers(5, args.vocab, 3).tolist() for _ in range(n)],
            "body_ids": [rng.integers(5, args.vocab, body).tolist() for _ in range(n)],
        },
        features=BLOCK_FEATURES,
    )
    blocks.save_to_disk(str(work / f"blocks-{block_len}"))
    blocks = datasets.load_from_disk(str(work / f"blocks-{block_len}"))
    c = bert_config(args, block_len)
    embedder = Retriever.from_config(c, RetrieverConfig(embed_dim=args.embed_dim)).doc_embedder
    embedder = embedder.to(dtype=DTYPES[precision])
    set_kernels(embedder, "cpu", precision, block_len)
    out = np.empty((n, args.embed_dim), dtype=np.float32)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        t = device_time(torch.device("cpu"))
        embed_blocks(embedder, blocks, SPECIAL, block_len, 64, out)
        return n / (device_time(torch.device("cpu")) - t)
    finally:
        torch.set_num_threads(threads)


def measure(args: argparse.Namespace) -> dict:
    set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    knobs = {"base": [0], "candidates": args.knob_candidates, "block_len": args.block_lens,
             "query_len": args.query_lens}  # fmt: skip
    rows: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for precision in precisions(args):
            base = time_step(args, precision, device)
            rows[f"base [{precision}]"] = {"step_s": base, "over_base": 1.0}
            for knob, values in knobs.items():
                for value in values if knob != "base" else []:
                    seconds = time_step(knob_args(args, knob, value), precision, device)
                    rows[f"{knob}={value} [{precision}]"] = {"step_s": seconds, "over_base": seconds / base}
            for block_len in sorted({args.block_len, *args.block_lens}):
                rate = builder_blocks_per_s(args, block_len, precision, Path(tmp))
                step_s = rows.get(f"block_len={block_len} [{precision}]", rows[f"base [{precision}]"])["step_s"]
                refresh_s = args.corpus_blocks / rate
                rows[f"builder block_len={block_len} [{precision}]"] = {
                    "blocks_s": rate,
                    "refresh_s": refresh_s,
                    "step_s": step_s,
                    "no_wait_interval": refresh_s / step_s,
                    "wait_s_per_refresh": {str(i): max(0.0, refresh_s - i * step_s) for i in args.intervals},
                }
    return {"args": vars(args), "device": str(device), "threads": torch.get_num_threads(), "rows": rows}


def format_table(result: dict) -> str:
    a = result["args"]
    lines = [
        f"REALM step knobs: BERT {a['layers']}x{a['hidden']}, base B {a['batch']}, K {a['candidates']} slots, query "
        f"{a['query_len']}, block {a['block_len']}; {result['device']}, {result['threads']} threads; median of "
        f"{a['steps']} steps",
        f"{'row':34}{'step ms':>10}{'x base':>8}",
    ]
    for label, row in result["rows"].items():
        if "blocks_s" not in row:
            lines.append(f"{label:34}{1e3 * row['step_s']:10.0f}{row['over_base']:8.2f}")
    lines.append(f"\nbuilder (1 thread) and refresh of {a['corpus_blocks']:,} blocks; trainer wait per refresh at "
                 f"refresh intervals {a['intervals']}")  # fmt: skip
    for label, row in result["rows"].items():
        if "blocks_s" in row:
            waits = ", ".join(f"{i}: {w:.0f} s" for i, w in row["wait_s_per_refresh"].items())
            lines.append(f"{label:34}{row['blocks_s']:8.1f} blocks/s  refresh {row['refresh_s']:7.0f} s  "
                         f"no wait from interval {row['no_wait_interval']:6.0f}  ({waits})")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = shape_parser(__doc__.splitlines()[0])
    p.add_argument("--knob-candidates", type=int, nargs="*", default=[3, 8])
    p.add_argument("--block-lens", type=int, nargs="*", default=[64, 288])
    p.add_argument("--query-lens", type=int, nargs="*", default=[30])
    p.add_argument("--builder-blocks", type=int, default=300, help="blocks embedded to time the builder")
    p.add_argument("--corpus-blocks", type=int, default=13000, help="corpus size of the refresh arithmetic")
    p.add_argument("--intervals", type=int, nargs="*", default=[10, 50, 100])
    args = p.parse_args(argv)
    result = measure(args)
    emit(result, format_table(result), args.json)


if __name__ == "__main__":
    main()
