"""Trainer-step throughput: the REALM step against its own matmul peak and against a plain BERT MLM step.

Measures, in one run on one machine (no absolute numbers are asserted anywhere):

- the matmul peak: a large ``torch.mm`` in fp32 and in bf16, in FLOP/s;
- the REALM step as ``trainer/pretrain_loop.py`` runs it: query embedding for the search (no_grad), ``retrieve``
  (search + packing), ``train_step`` + backward, clipping and the AdamW step; its model FLOPs (counted analytically, see
  ``benchmarks/flops.py``) per second, and that as a fraction of the peak (MFU);
- with ``--prefetch``, the same step with ``train.prefetch_candidates`` (``trainer/candidate_prefetch.py``: the next
  batch's search and packing run in a worker thread while this one trains; only its query embedding stays on the
  critical path), its ``REALM/this`` being the speed-up;
- a plain ``BertForMaskedLM`` of the same shape (head over all positions, + backward + AdamW) over the *same* padded
  tensors: the B*K reader sequences only, and the reader + document + query sequences (every token the step encodes);
- the QA fine-tuning step (``finetune/train.py``: query tower against frozen block embeddings of ``--qa-beam`` blocks,
  the span reader over the top ``--candidates``, the marginal loss, backward, clip, AdamW) on random batches of the
  same shape, its FLOPs those of the BERT layers (the span MLP not counted).

The three steps take turns, step i of each back to back, so load on shared cores hits every row alike; ``REALM/this``
is the median of the per-step ratios (REALM step time / that row's step time). On cores other jobs are using,
``--threads 1`` gives steadier figures than oversubscribed OpenMP threads.

Run from the repository root: ``python -m benchmarks.step`` (the demo shape, 1-1.5 min on 2 cores), or at
BERT-base shape: ``python -m benchmarks.step --hidden 768 --layers 12 --heads 12 --intermediate 3072 --vocab 30522
--batch 8 --block-len 288 --body-len 256``; at all-MiniLM-L6-v2's shape (``realm real-text``): ``--hidden 384
--layers 6 --heads 12 --intermediate 1536 --vocab 30522 --batch 8 --block-len 128 --body-len 120``. Every row runs in
fp32 and in bf16 (autocast over fp32 weights, the attention kernel ``realm.core.precision`` picks), side by side in
one run (``--precisions fp32`` or ``--bf16`` for one of them), each with its MFU against both matmul peaks.
``--prefetch`` adds the prefetched row (on a GPU: ``python -m benchmarks.step --bf16 --prefetch`` and the BERT-base
flags), ``--json PATH`` keeps the figures.
Times are medians over ``--steps`` after ``--warmup`` steps; tokens are padded positions (the work actually done).
"""

from __future__ import annotations

import argparse
import statistics

from benchmarks.harness import emit  # isort:skip  (first: no hub, no W&B)
import torch
from benchmarks.flops import matmul_peak, realm_flops
from benchmarks.timed_steps import (
    MlmStep,
    PrefetchedRealmStep,
    QaStep,
    RealmStep,
    bert_config,
    reader_length,
    shape_parser,
    step_seqs,
)
from transformers import BertModel

from realm.core.cpu_matmul import cpu_matmul as fp32_cpu_matmul
from realm.core.logging import set_num_threads
from realm.core.precision import set_kernels

PART_NAMES = {
    "search_embed": "search embed (no_grad)",
    "retrieve": "retrieve (search+packing)",
    "candidates": "candidates, critical path",
    "fwd_bwd": "forward+backward",
    "optimizer": "clip+AdamW",
}


def precisions(args: argparse.Namespace) -> list[str]:
    """The precisions to time side by side: ``--precisions`` (``fp32,bf16`` by default), or bf16 alone with
    ``--bf16``."""
    names = ["bf16"] if args.bf16 else args.precisions.split(",")
    if not names or any(name not in ("fp32", "bf16") for name in names):
        raise SystemExit(f"--precisions must be a comma-separated list of fp32 and bf16, got {args.precisions!r}")
    return names


def build_steps(args: argparse.Namespace, c, device: torch.device, precision: str) -> dict[str, object]:
    """The REALM step(s) and both baselines in ``precision``, each model with the attention kernel the jobs give it
    there and at this length (``realm.core.precision.set_kernels``), labelled ``"row [precision]"``."""
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
    steps: dict[str, object] = {"REALM step": RealmStep(args, c, device, autocast)}
    if args.prefetch:
        steps["REALM step, prefetched"] = PrefetchedRealmStep(args, c, device, autocast)
    steps["BERT MLM, reader seqs"] = MlmStep(c, device, autocast, ("reader",))
    steps["BERT MLM, all seqs"] = MlmStep(c, device, autocast, ("reader", "doc", "query"))
    steps["QA fine-tuning step"] = QaStep(args, c, device, autocast)
    for step in steps.values():
        model = step.model if hasattr(step, "model") else step.mlm
        set_kernels(model, device.type, precision, reader_length(args))
        if args.compile:
            for module in model.modules():
                if isinstance(module, BertModel):
                    module.compile(dynamic=True)
    return {f"{label} [{precision}]": step for label, step in steps.items()}


def measure(args: argparse.Namespace) -> dict:
    """Runs the peaks, then the REALM and baseline steps of every precision in turns; returns the figures (what
    ``--json`` writes)."""
    set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    names = precisions(args)
    c = bert_config(args, reader_length(args))
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    peaks = {name: matmul_peak(dt, args.peak_size, device) for name, dt in dtypes.items()}

    # note: every step kind of every precision takes its turn in each round (REALM i, then the baselines on REALM
    # i's tensors), so load that drifts during the run (shared cores) slows every row alike and the ratios stay fair
    per_precision = {name: build_steps(args, c, device, name) for name in names}
    realm_labels = [label for steps in per_precision.values() for label in steps if label.startswith("REALM")]
    parts: dict[str, dict[str, list[float]]] = {label: {} for label in realm_labels}
    figures: dict[str, list[tuple[float, float, int]]] = {
        label: [] for steps in per_precision.values() for label in steps
    }
    seqs_shapes = {}
    for step in range(args.warmup + args.steps):
        for name, steps in per_precision.items():
            results = {label: run() for label, run in steps.items() if label.startswith("REALM")}
            seqs = step_seqs(results[f"REALM step [{name}]"][1])
            seqs_shapes = {tower: list(s[0].shape) for tower, s in seqs.items()}
            measured = {label: run(seqs) for label, run in steps.items() if label.startswith("BERT")}
            measured |= {label: run() for label, run in steps.items() if label.startswith("QA")}
            if step < args.warmup:
                continue
            for label, (times, batch) in results.items():
                for key, dt in times.items():
                    parts[label].setdefault(key, []).append(dt)
                tokens = sum(ids.numel() for ids, _, _ in step_seqs(batch).values())
                figures[label].append((times["step"], realm_flops(c, batch, args.embed_dim), tokens))
            for label, figure in measured.items():
                figures[label].append(figure)
    # note: measured again after the steps, keeping the better, so a busy moment at start-up does not inflate MFU
    peaks = {name: max(peaks[name], matmul_peak(dt, args.peak_size, device)) for name, dt in dtypes.items()}
    return {
        "args": vars(args),
        "device": str(device),
        "threads": torch.get_num_threads(),
        "seq_shapes": seqs_shapes,
        "peak_flops": peaks,
        "cpu_matmul": fp32_cpu_matmul() if device.type == "cpu" else "cuda",
        "rows": table_rows(figures, parts, peaks, names),
        "bf16_speedup": speedups(figures) if len(names) > 1 else {},
    }


def speedups(figures: dict[str, list[tuple[float, float, int]]]) -> dict[str, float]:
    """Per step kind, the median fp32 step time over the median bf16 one (same run, same turns)."""
    out = {}
    for label, values in figures.items():
        if label.endswith("[fp32]") and (bf16 := figures.get(label.replace("[fp32]", "[bf16]"))):
            out[label.removesuffix(" [fp32]")] = statistics.median(v[0] for v in values) / statistics.median(
                v[0] for v in bf16
            )
    return out


def table_rows(figures: dict[str, list[tuple[float, float, int]]], parts: dict[str, dict[str, list[float]]],
               peaks: dict[str, float], names: list[str]) -> dict[str, dict[str, float]]:  # fmt: skip
    """Per step kind, the medians of its (seconds, FLOPs, tokens) per step as rates, MFU against the fp32 and the
    bf16 matmul peak and the REALM step's time over its own (same precision); then the REALM steps' parts, keyed
    ``"step label / part"``."""
    rows: dict[str, dict[str, float]] = {}
    for label, values in figures.items():
        precision = label.rsplit("[", 1)[1].rstrip("]")
        realm = figures[f"REALM step [{precision}]"]
        seconds, flops, tokens = (statistics.median(v) for v in zip(*values))
        # note: the ratio is the median of per-step ratios: steps i of both ran back to back under the same load
        ratio = statistics.median(r[0] / v[0] for r, v in zip(realm, values))
        rows[label] = {
            "ms": 1e3 * seconds,
            "steps_s": 1 / seconds,
            "tokens_s": tokens / seconds,
            "gflops_s": flops / seconds / 1e9,
            "mfu_fp32_peak": flops / seconds / peaks["fp32"],
            "mfu_bf16_peak": flops / seconds / peaks["bf16"],
            "realm_over_this": ratio,
        }
        # note: a part's row is keyed "step label / part"; the table shows the part, indented under its step
        for key, name in PART_NAMES.items():
            if key in parts.get(label, {}):
                rows[f"{label} / {name}"] = {"ms": 1e3 * statistics.median(parts[label][key])}
    return rows


def format_table(result: dict) -> str:
    """The shape on top, the peaks, then one row per step kind and precision (indented rows split the REALM step),
    then the bf16 speed-ups."""
    a = result["args"]
    seqs = ", ".join(f"{name} {n}x{length}" for name, (n, length) in result["seq_shapes"].items())
    lines = [
        f"BERT: hidden {a['hidden']}, layers {a['layers']}, heads {a['heads']}, intermediate {a['intermediate']}, "
        f"vocab {a['vocab']} ({result['device']}, {result['threads']} threads; bf16 = autocast over fp32 weights; "
        f"fp32 linears: {result['cpu_matmul']})",
        f"step: B {a['batch']} queries, K {a['candidates']} slots, {a['span']} masked, corpus {a['corpus']}; "
        f"padded seqs x len: {seqs}; median of {a['steps']} steps after {a['warmup']} warm-up",
    ]
    lines += [
        f"matmul peak ({name} mm {a['peak_size']}^3): {value / 1e9:,.1f} GFLOP/s"
        for name, value in result["peak_flops"].items()
    ]
    header = (f"{'ms/step':>9}{'steps/s':>9}{'tokens/s':>10}{'GFLOP/s':>9}{'MFU fp32':>9}{'MFU bf16':>9}"
              f"{'REALM/this':>12}")  # fmt: skip
    lines.append(f"\n{'':35}{header}")
    for label, row in result["rows"].items():
        line = f"{label if 'mfu_fp32_peak' in row else '  ' + label.split(' / ')[-1]:35}{row['ms']:9.1f}"
        if "mfu_fp32_peak" in row:
            line += (
                f"{row['steps_s']:9.2f}{row['tokens_s']:10,.0f}{row['gflops_s']:9.2f}{row['mfu_fp32_peak']:9.1%}"
                f"{row['mfu_bf16_peak']:9.1%}{row['realm_over_this']:12.2f}"
            )
        lines.append(line)
    if result["bf16_speedup"]:
        lines.append("\nbf16 over fp32 (median step time ratio, same run): " + ", ".join(
            f"{label} {ratio:.2f}x" for label, ratio in result["bf16_speedup"].items()))  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = shape_parser(__doc__.splitlines()[0]).parse_args(argv)
    result = measure(args)
    emit(result, format_table(result), args.json)


if __name__ == "__main__":
    main()
