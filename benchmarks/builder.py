"""Index-builder throughput: 1 vs 2 builder processes, embedding vs the bare model, and a full-Wikipedia projection.

Measures, in one run on one machine (no time is asserted anywhere):

- (a) the builder as it runs (``realm.index_builder.watch --enable_distributed=true`` under ``torchrun``, one thread per
  process) at 1 and at 2 processes on the same random corpus: blocks/s of the whole build (model load, shard embedding,
  assembly, FAISS, publish; process start-up excluded) and of the embedding alone, and the 2/1 speed-up;
- (b) ``embed_blocks`` (what every rank runs: Arrow reads, packing, forward, projection, writes into the memmap)
  against a bare ``BertModel`` forward over exactly the same padded batches (built beforehand, in the same
  length-sorted order), in alternating rounds; the ratio is the median over rounds (target >= 0.9); and the loader
  alone (Arrow reads and packing, no model: what ``embed_blocks``'s loader thread must keep ahead of the forward):
  its blocks/s against the bare forward's says whether the device can be kept busy at all;
- (c) the projected time of one full REALM refresh, 13,353,718 blocks x 288 wordpieces through BERT-base (forward
  FLOPs counted as in ``benchmarks/step.py``), on 1 and 8 devices, at ``--gpu-tflops`` (or, without it, this run's
  measured ``torch.mm`` peak in ``--precision`` on ``--device``) and at the embedding's measured share of this run's
  peak (its MFU). The 8-device figure
  assumes linear scaling (each rank embeds its own shard; the assembly, FAISS and publish are not included);
- (d) ``embed_blocks`` with the document tower in each of ``--compare`` (default fp32 and bf16, as the builder casts
  it, with the attention kernel the builder picks), in alternating rounds on the same blocks: blocks/s, MFU against
  the same run's fp32 and bf16 ``torch.mm`` peaks, and each precision's speed-up over the first.

Run from the repository root: ``python -m benchmarks.builder`` (about a minute on 2 idle CPU cores), ``--quick`` for a
smoke run, ``--gpu-tflops 400`` to project for a GPU of that sustained rate, ``--json PATH`` to keep the figures.
On a GPU, BERT-base in bf16 (MFU against the same run's bf16 matmul peak)::

    python -m benchmarks.builder --device cuda --precision bf16 --hidden 768 --layers 12 --heads 12 --intermediate 3072 \
        --vocab 30522 --block-len 288 --body-len 280 --blocks 20000 --embed-blocks 4000 --batch 256 --peak-size 8192
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import REPO, write_json  # isort:skip  (first: no hub, no W&B)
import datasets
import numpy as np
import torch
from benchmarks.flops import bert_flops, device_time, matmul_peak  # benchmarks/flops.py, beside this file
from benchmarks.timed_steps import BERT_SHAPE_FLAGS, bert_config
from transformers import BertConfig, BertTokenizer

from realm.data.blocks import BLOCK_FEATURES
from realm.data.packing import SpecialIds
from realm.core.precision import DTYPES, set_kernels
from realm.index.embedding import block_lengths, embed_blocks, packed_batches
from realm.models.retriever import Retriever, RetrieverConfig
from realm.run import layout, live_index, publication

WIKIPEDIA_BLOCKS, WIKIPEDIA_LEN = 13_353_718, 288
BERT_BASE = BertConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)


def _parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in [
        *BERT_SHAPE_FLAGS,
        ("embed-dim", 128),
        ("block-len", 96),
        ("body-len", 90),
        ("blocks", 10000),
        ("embed-blocks", 2000),
        ("batch", 64),
        ("rounds", 3),
        ("threads", 1),
        ("peak-size", 1024),
    ]:
        p.add_argument(f"--{name}", type=int, default=default)
    p.add_argument("--gpu-tflops", type=float, default=0.0, help="sustained TFLOP/s of one device (0: measured peak)")
    p.add_argument("--processes", type=int, nargs="+", default=[1, 2], help="builder process counts to run")
    p.add_argument("--device", default="cpu", help="cpu or cuda (each builder rank takes its local GPU)")
    p.add_argument("--precision", default="fp32", choices=sorted(DTYPES), help="the builder's embedding dtype")
    p.add_argument("--compare", default="fp32,bf16", help="(d): the embedding precisions timed side by side ('' skips)")
    p.add_argument("--quick", action="store_true", help="a smoke run: small corpus, one round")
    p.add_argument("--json", default=None, help="also write the figures to this path")
    args = p.parse_args(argv)
    if args.quick:
        args.blocks, args.embed_blocks, args.rounds = 1200, 400, 1
    return args


def forward_flops(c: BertConfig, num_seqs: int, seq_len: int, embed_dim: int) -> float:
    """Forward FLOPs of a BERT embedder over [num_seqs, seq_len] padded tokens (+ the [CLS] projection):
    ``benchmarks/step.py``'s training count without the backward's factor 3."""
    return bert_flops(c, num_seqs, seq_len) / 3 + 2 * num_seqs * c.hidden_size * embed_dim


def make_corpus(root: Path, args: argparse.Namespace) -> tuple[Path, Path]:
    """A random corpus whose bodies nearly fill the block (as REALM's do), and a matching WordPiece vocabulary."""
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *[f"w{i}" for i in range(args.vocab - 5)]]
    # note: vocab= (a dict), not vocab_file=, which transformers 5 ignores (leaving the 5 special tokens alone)
    BertTokenizer(vocab={piece: i for i, piece in enumerate(vocab)}).save_pretrained(root / "tokenizer")
    rng = np.random.default_rng(0)
    n = args.blocks
    lengths = rng.integers(max(1, args.body_len - 16), args.body_len + 1, n)
    blocks = datasets.Dataset.from_dict(
        {
            "uid": [f"u{i}" for i in range(n)],
            "doc_id": [f"d{i // 4}" for i in range(n)],
            "title": [""] * n,
            "text": [""] * n,
            "title_ids": [rng.integers(5, args.vocab, 3).tolist() for _ in range(n)],
            "body_ids": [rng.integers(5, args.vocab, int(k)).tolist() for k in lengths],
        },
        features=BLOCK_FEATURES,
    )
    blocks.save_to_disk(root / "blocks")
    return root / "blocks", root / "tokenizer"


def export(run_dir: Path, args: argparse.Namespace, blocks: Path, tokenizer: Path) -> Retriever:
    torch.manual_seed(0)
    cfg = RetrieverConfig(embed_dim=args.embed_dim, max_block_length=args.block_len)
    retriever = Retriever.from_config(bert_config(args, args.block_len), cfg)
    layout.export_retriever(
        run_dir, 1, retriever, blocks_path=str(blocks), tokenizer_path=str(tokenizer), max_block_length=args.block_len
    )
    return retriever


def builder_run(run_dir: Path, processes: int, args: argparse.Namespace) -> dict[str, float]:
    """One build of the export in ``run_dir`` by ``processes`` builder processes; figures from its manifest."""
    # note: the repository first on the caller's path (not instead of it); accelerate is told to stay on the CPU only
    # for a CPU run, or a GPU build would silently run on the CPU
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": str(args.threads)}
    if args.device == "cpu":
        env["ACCELERATE_USE_CPU"] = "true"
    else:
        env.pop("ACCELERATE_USE_CPU", None)
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", WANDB_MODE="disabled", TOKENIZERS_PARALLELISM="false")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes)]
    cmd += ["-m", "realm.index_builder.watch", "--config", str(REPO / "configs/index/tiny.yaml"),
            "--run_dir", str(run_dir)]
    cmd += ["--once=true", "--enable_distributed=true", f"--batch_size={args.batch}", f"--num_threads={args.threads}"]
    cmd += [f"--device={args.device}", f"--precision={args.precision}"]
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"builder with {processes} process(es) failed:\n{proc.stderr[-4000:]}")
    manifest = publication.read_manifest(live_index.current_index_version(run_dir))
    assert manifest["builder_processes"] == processes, manifest["builder_processes"]
    n = manifest["num_vectors"]
    return {
        "build_s": manifest["build_seconds"],
        "embed_s": manifest["embed_seconds"],
        "wall_s": wall,
        "build_blocks_per_s": n / manifest["build_seconds"],
        "embed_blocks_per_s": n / manifest["embed_seconds"],
    }


def embed_vs_bare(embedder, blocks: datasets.Dataset, special: SpecialIds, args: argparse.Namespace) -> dict:
    """``embed_blocks`` vs a bare ``BertModel`` forward over the same padded batches, alternating, per round."""
    rows = np.arange(min(args.embed_blocks, len(blocks)))
    sub = blocks.select(rows)
    order = np.argsort(block_lengths(sub, args.block_len), kind="stable")  # embed_blocks's own batch order
    device = next(embedder.parameters()).device
    packed = packed_batches(sub, np.arange(len(sub)), order, special, args.block_len, args.batch, pin=False)
    batches = [{name: t.to(device) for name, t in inputs.items()} for _, inputs in packed]
    padded_tokens = sum(b["input_ids"].numel() for b in batches)
    out = np.lib.format.open_memmap(
        Path(tempfile.mkdtemp()) / "e.npy", mode="w+", dtype=np.float32, shape=(len(sub), args.embed_dim)
    )
    embedder.eval()
    bare_s, embed_s = [], []
    with torch.inference_mode():
        embedder.bert(**batches[0])  # warm-up
    for _ in range(args.rounds):
        t0 = device_time(device)
        with torch.inference_mode():
            for inputs in batches:
                embedder.bert(**inputs)
        bare_s.append(device_time(device) - t0)
        t0 = time.perf_counter()
        embed_blocks(embedder, sub, special, args.block_len, args.batch, out)  # ends with a copy to host memory
        embed_s.append(time.perf_counter() - t0)
    ratios = [b / e for b, e in zip(bare_s, embed_s)]
    loader_s = []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        for _ in packed_batches(sub, np.arange(len(sub)), order, special, args.block_len, args.batch, pin=False):
            pass
        loader_s.append(time.perf_counter() - t0)
    seq_flops = sum(forward_flops(embedder.config, *b["input_ids"].shape, args.embed_dim) for b in batches)
    return {
        "blocks": len(sub),
        "padded_tokens": padded_tokens,
        "bare_blocks_per_s": len(sub) / statistics.median(bare_s),
        "embed_blocks_per_s": len(sub) / statistics.median(embed_s),
        "embed_over_bare": statistics.median(ratios),
        "loader_blocks_per_s": len(sub) / statistics.median(loader_s),
        "embed_flops_per_s": seq_flops / statistics.median(embed_s),
    }


def embed_by_precision(retriever: Retriever, blocks: datasets.Dataset, special: SpecialIds,
                       args: argparse.Namespace, device: torch.device) -> dict[str, dict[str, float]]:  # fmt: skip
    """(d): ``embed_blocks`` with the document tower cast to each precision of ``--compare``, rounds alternating
    between them (load on shared cores hits each alike); blocks/s, MFU against both peaks, speed-up over the first."""
    names = [name for name in args.compare.split(",") if name]
    sub = blocks.select(np.arange(min(args.embed_blocks, len(blocks))))
    embedders = {}
    for name in names:
        embedders[name] = copy.deepcopy(retriever.doc_embedder).to(device=device, dtype=DTYPES[name]).eval()
        set_kernels(embedders[name], device.type, name, args.block_len)
    out = np.lib.format.open_memmap(
        Path(tempfile.mkdtemp()) / "e.npy", mode="w+", dtype=np.float32, shape=(len(sub), args.embed_dim)
    )
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(args.rounds + 1):
        for name, embedder in embedders.items():
            t0 = time.perf_counter()
            embed_blocks(embedder, sub, special, args.block_len, args.batch, out)
            if round_:  # note: round 0 warms up every precision's kernels
                seconds[name].append(time.perf_counter() - t0)
    order = np.argsort(block_lengths(sub, args.block_len), kind="stable")
    packed = packed_batches(sub, np.arange(len(sub)), order, special, args.block_len, args.batch, pin=False)
    flops = sum(forward_flops(retriever.doc_embedder.config, *b["input_ids"].shape, args.embed_dim) for _, b in packed)
    peaks = {name: matmul_peak(DTYPES[name], args.peak_size, device) for name in ("fp32", "bf16")}
    first = statistics.median(seconds[names[0]]) if names else 0.0
    return {
        name: {
            "blocks_per_s": len(sub) / statistics.median(times),
            "mfu_fp32_peak": flops / statistics.median(times) / peaks["fp32"],
            "mfu_bf16_peak": flops / statistics.median(times) / peaks["bf16"],
            f"speedup_over_{names[0]}": first / statistics.median(times),
        }
        for name, times in seconds.items()
    }


def projection(rate: float, utilization: float) -> dict[str, float]:
    """Hours for one full REALM refresh at ``rate`` FLOP/s per device, ideal and at ``utilization`` of it."""
    total = WIKIPEDIA_BLOCKS * forward_flops(BERT_BASE, 1, WIKIPEDIA_LEN, 128)
    return {
        "total_pflop": total / 1e15,
        **{f"hours_{g}dev_ideal": total / (rate * g) / 3600 for g in (1, 8)},
        **{f"hours_{g}dev_measured_util": total / (rate * utilization * g) / 3600 for g in (1, 8)},
    }


def main(argv: list[str] | None = None) -> dict:
    args = _parse(argv)
    torch.set_num_threads(args.threads)
    root = Path(tempfile.mkdtemp(prefix="bench-builder-"))
    blocks_path, tokenizer = make_corpus(root, args)
    retriever = None
    results: dict = {"args": vars(args), "builder": {}}
    for processes in args.processes:
        run_dir = root / f"run{processes}"
        retriever = export(run_dir, args, blocks_path, tokenizer)
        results["builder"][processes] = builder_run(run_dir, processes, args)
    if {1, 2} <= set(args.processes):
        one, two = results["builder"][1], results["builder"][2]
        results["speedup_build"] = two["build_blocks_per_s"] / one["build_blocks_per_s"]
        results["speedup_embed"] = two["embed_blocks_per_s"] / one["embed_blocks_per_s"]

    special = SpecialIds.of(BertTokenizer.from_pretrained(str(tokenizer)))
    device, dtype = torch.device("cuda" if args.device.startswith("cuda") else "cpu"), DTYPES[args.precision]
    embedder = retriever.doc_embedder.to(device=device, dtype=dtype)  # as the builder loads it
    results["embed"] = embed_vs_bare(embedder, datasets.load_from_disk(str(blocks_path)), special, args)
    peak = matmul_peak(dtype, args.peak_size, device)
    utilization = results["embed"]["embed_flops_per_s"] / peak
    rate = args.gpu_tflops * 1e12 if args.gpu_tflops > 0 else peak
    results.update(peak_flops_per_s=peak, embed_utilization=utilization, projection_rate=rate)
    results["wikipedia"] = projection(rate, utilization)
    blocks = datasets.load_from_disk(str(blocks_path))
    results["by_precision"] = embed_by_precision(retriever, blocks, special, args, device)

    e, w = results["embed"], results["wikipedia"]
    print(f"corpus: {args.blocks} blocks <= {args.block_len} wordpieces; BERT {args.layers}x{args.hidden}; ", end="")
    print(f"batch {args.batch}; {args.threads} thread(s) per process; {args.device}, {args.precision}")
    print("(a) processes | build blocks/s | embed blocks/s | build s | embed s | wall s (with start-up)")
    for p, r in results["builder"].items():
        print(
            f"    {p:9d} | {r['build_blocks_per_s']:14.0f} | {r['embed_blocks_per_s']:14.0f} | {r['build_s']:7.1f} "
            f"| {r['embed_s']:7.1f} | {r['wall_s']:6.1f}"
        )
    if "speedup_build" in results:
        print(f"    2/1 speed-up: build {results['speedup_build']:.2f}x, embedding {results['speedup_embed']:.2f}x")
    print(
        f"(b) embed_blocks {e['embed_blocks_per_s']:.0f} blocks/s vs bare BertModel forward "
        f"{e['bare_blocks_per_s']:.0f} blocks/s, same padded batches of {e['blocks']} blocks: "
        f"{100 * e['embed_over_bare']:.1f}% (target >= 90%); the loader alone {e['loader_blocks_per_s']:.0f} "
        f"blocks/s ({e['loader_blocks_per_s'] / e['bare_blocks_per_s']:.1f}x the bare forward)"
    )
    print(
        f"(c) {args.precision} matmul peak {peak / 1e9:.1f} GFLOP/s; "
        f"embedding at {e['embed_flops_per_s'] / 1e9:.1f} GFLOP/s "
        f"= {100 * utilization:.1f}% of it. Full refresh, {WIKIPEDIA_BLOCKS:,} x {WIKIPEDIA_LEN} through "
        f"BERT-base = {w['total_pflop']:.0f} PFLOP; at {rate / 1e12:.3g} TFLOP/s a device"
        f"{'' if args.gpu_tflops else ' (this run peak)'}:"
    )
    print(
        f"    1 device: {w['hours_1dev_ideal']:.1f} h at 100%, {w['hours_1dev_measured_util']:.1f} h at "
        f"{100 * utilization:.0f}%; 8 devices: {w['hours_8dev_ideal']:.2f} h / "
        f"{w['hours_8dev_measured_util']:.2f} h (linear scaling)"
    )
    for name, r in results["by_precision"].items():
        print(
            f"(d) {name}: embed_blocks {r['blocks_per_s']:.0f} blocks/s, MFU {100 * r['mfu_fp32_peak']:.1f}% of the "
            f"fp32 peak, {100 * r['mfu_bf16_peak']:.1f}% of the bf16 peak; "
            + ", ".join(f"{k.replace('_', ' ')} {v:.2f}x" for k, v in r.items() if k.startswith("speedup"))
        )
    write_json(args.json, results)
    return results


if __name__ == "__main__":
    main()
