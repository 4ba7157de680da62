"""Trainer-step throughput: the REALM step against its own matmul peak and against a plain BERT MLM step.

Measures, in one run on one machine (no absolute numbers are asserted anywhere):

- the matmul peak: a large ``torch.mm`` (fp32, and bf16 with ``--bf16``) in FLOP/s;
- the REALM step as ``trainer/loop.py`` runs it: query embedding for the search (no_grad), ``retrieve`` (search +
  packing), ``train_step`` + backward, clipping and the AdamW step; its model FLOPs (counted analytically, see
  ``bert_flops``) per second, and that as a fraction of the peak (MFU);
- with ``--prefetch``, the same step with ``train.prefetch_candidates`` (``trainer/candidate_prefetch.py``: the next
  batch's search and packing run in a worker thread while this one trains; only its query embedding stays on the
  critical path), its ``REALM/this`` being the speed-up;
- a plain ``BertForMaskedLM`` of the same shape (head over all positions, + backward + AdamW) over the *same* padded
  tensors: the B*K reader sequences only, and the reader + document + query sequences (every token the step encodes).

The three steps take turns, step i of each back to back, so load on shared cores hits every row alike; ``REALM/this``
is the median of the per-step ratios (REALM step time / that row's step time). On cores other jobs are using,
``--threads 1`` gives steadier figures than oversubscribed OpenMP threads.

Run from the repository root: ``python bench/step.py`` (the demo shape, 1-1.5 min on 2 cores), or at
BERT-base shape: ``python bench/step.py --hidden 768 --layers 12 --heads 12 --intermediate 3072 --vocab 30522
--batch 8 --block-len 288 --body-len 256``. Add ``--bf16`` for autocast, ``--prefetch`` for the prefetched row (on
a GPU: ``python bench/step.py --bf16 --prefetch`` and the BERT-base flags), ``--json PATH`` to keep the figures.
Times are medians over ``--steps`` after ``--warmup`` steps; tokens are padded positions (the work actually done).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from contextlib import AbstractContextManager

import numpy as np
import torch
from torch import Tensor, nn
from transformers import BertConfig, BertForMaskedLM

from realm.core.logging import set_num_threads
from realm.data.packing import SpecialIds
from realm.index.mips import BruteForceIndex
from realm.models.retriever import RetrieverConfig
from realm.pretrain.batch import PretrainCollator, RealmBatch
from realm.pretrain.candidates import retrieve, start_search
from realm.pretrain.loss import get_loss
from realm.pretrain.model import RealmModel
from realm.pretrain.step import train_step
from realm.training.optim import OptimConfig, build_optimizer
from trainer.candidate_prefetch import CandidatePipeline

SPECIAL = SpecialIds(cls=2, sep=3, pad=0, mask=4)
Seqs = tuple[Tensor, Tensor, Tensor]  # input_ids, attention_mask, token_type_ids, each [N, L]


def shape_parser(description: str) -> argparse.ArgumentParser:
    """The model and step shape flags (the demo shape by default), shared with ``bench/hf_realm_peer.py``."""
    p = argparse.ArgumentParser(description=description)
    for name, default in [
        ("hidden", 128),
        ("layers", 2),
        ("heads", 4),
        ("intermediate", 512),
        ("vocab", 6000),
        ("batch", 16),
        ("query-len", 14),
        ("span", 3),
        ("candidates", 5),
        ("extra", 2),
        ("body-len", 64),
        ("block-len", 96),
        ("corpus", 2000),
        ("embed-dim", 128),
        ("steps", 8),
        ("warmup", 2),
        ("threads", 0),
        ("peak-size", 2048),
    ]:
        p.add_argument(f"--{name}", type=int, default=default)
    p.add_argument("--bf16", action="store_true", help="torch.autocast bf16 (cuda when present, else cpu)")
    p.add_argument(
        "--prefetch", action="store_true",
        help="also time the step with train.prefetch_candidates (the next batch searched while this one trains)",
    )  # fmt: skip
    p.add_argument("--json", default=None, help="also write the figures to this path")
    return p


def bert_config(args: argparse.Namespace, max_length: int) -> BertConfig:
    """The BERT of the shape flags for sequences up to ``max_length``, dropout off (timings, not training); shared
    with ``bench/builder.py`` and ``bench/hf_realm_peer.py``."""
    return BertConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        intermediate_size=args.intermediate,
        max_position_embeddings=max(512, max_length),
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )


class RandomStore:
    """A ``BlockStore`` stand-in: random titles and bodies; block i has uid hash i + 1."""

    def __init__(self, num_blocks: int, body_len: int, vocab: int, rng: np.random.Generator) -> None:
        self.titles = [rng.integers(5, vocab, 3).tolist() for _ in range(num_blocks)]
        # note: bodies of body_len-8..body_len keep the padded shape (what the FLOPs count) close to the real one
        self.bodies = [
            rng.integers(5, vocab, int(rng.integers(max(1, body_len - 8), body_len + 1))).tolist()
            for _ in range(num_blocks)
        ]
        self.uid_hashes = np.arange(1, num_blocks + 1, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.titles)

    def tokens(self, ids: list[int]) -> tuple[list[list[int]], list[list[int]]]:
        return [self.titles[i] for i in ids], [self.bodies[i] for i in ids]


def device_time(device: torch.device) -> float:
    """``time.perf_counter()`` once the device's queued work is done (CUDA kernels run asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize()  # note: CUDA kernels are async; the clock must wait for them
    return time.perf_counter()


def matmul_peak(dtype: torch.dtype, n: int, device: torch.device, repeats: int = 5) -> float:
    """FLOP/s of an [n, n] @ [n, n] ``torch.mm`` (2 n^3 FLOPs): the best of ``repeats`` after one warm-up.

    The best, not the median: a peak is what the machine can reach, and on shared cores the median drifts with load.
    """
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    torch.mm(a, b)
    times = []
    for _ in range(repeats):
        t0 = device_time(device)
        torch.mm(a, b)
        times.append(device_time(device) - t0)
    return 2 * n**3 / min(times)


def bert_flops(c: BertConfig, num_seqs: int, seq_len: int) -> float:
    """Training (forward + backward = 3x forward) FLOPs of a BERT's layers over [num_seqs, seq_len] padded tokens.

    Per token and layer the forward does 2 * (4 h^2 + 2 h f) in the QKV/output and FFN matmuls, and per sequence and
    layer 2 * 2 * L^2 * h in QK^T and AV; so 6 * N * L * l * (4 h^2 + 2 h f) + 12 * N * l * h * L^2 in all.
    Embedding lookups, softmax and norms are not counted (torch's FlopCounterMode agrees within ~10%).
    """
    h, f, n_layers = c.hidden_size, c.intermediate_size, c.num_hidden_layers
    return 6 * num_seqs * seq_len * n_layers * (4 * h * h + 2 * h * f) + 12 * num_seqs * n_layers * h * seq_len**2


def mlm_head_flops(c: BertConfig, num_positions: int) -> float:
    """Training FLOPs of the MLM head (transform + decoder) at ``num_positions``: 6 * (h^2 + h V) each."""
    return 6 * num_positions * (c.hidden_size**2 + c.hidden_size * c.vocab_size)


def realm_flops(c: BertConfig, batch: RealmBatch, embed_dim: int) -> float:
    """Model FLOPs of a REALM step: query embedder (B), doc embedder (B*(K-1) blocks + the null block), encoder (B*K).

    Plus the embedders' [CLS] projection (6 h D a sequence) and the MLM head at the B*K*M masked positions only.
    The search's no_grad query embedding repeats the query tower's forward, so (as rematerialisation in MFU) it is
    not counted; neither is the search itself.
    """
    cand = batch.candidates
    b, k, reader_len = cand.reader_input_ids.shape
    return (
        bert_flops(c, b, batch.query_input_ids.shape[1])
        + bert_flops(c, b * (k - 1), cand.doc_input_ids.shape[2])
        + bert_flops(c, 1, cand.null_input_ids.shape[1])
        + 6 * (b * k + 1) * c.hidden_size * embed_dim
        + bert_flops(c, b * k, reader_len)
        + mlm_head_flops(c, b * k * batch.mask_positions.shape[1])
    )


def step_seqs(batch: RealmBatch) -> dict[str, Seqs]:
    """The padded sequences the step encodes, by tower: reader [B*K, Lr], doc [B*(K-1), Ld], query [B, Lq]."""
    cand = batch.candidates.to("cpu")
    fields = ("input_ids", "attention_mask", "token_type_ids")
    seqs = {name: tuple(getattr(cand, f"{name}_{f}").flatten(0, 1) for f in fields) for name in ("reader", "doc")}
    query = batch.query_input_ids.cpu()
    return {**seqs, "query": (query, batch.query_attention_mask.cpu(), torch.zeros_like(query))}


class RealmStep:
    """The trainer's step (as ``trainer/loop.py`` runs it) on fresh random queries, timed part by part."""

    def __init__(self, args: argparse.Namespace, c: BertConfig, device: torch.device, autocast: AbstractContextManager):
        self.args, self.device, self.autocast = args, device, autocast
        self.rng = np.random.default_rng(0)
        self.cfg = RetrieverConfig(
            embed_dim=args.embed_dim,
            max_query_length=args.query_len + 2,
            max_block_length=args.block_len,
            num_candidates=args.candidates,
            num_extra_retrieved=args.extra,
        )
        self.model = RealmModel.from_config(c, self.cfg).to(device)
        self.optimizer, self.scheduler = build_optimizer(
            self.model, OptimConfig(lr=1e-4, warmup_steps=0), args.warmup + args.steps
        )
        self.loss_fn = get_loss("per_token")
        self.store = RandomStore(args.corpus, args.body_len, args.vocab, self.rng)
        # note: a fixed random index is enough: between refreshes the trainer only reads it, and timings do not
        # depend on which blocks come back
        self.index = BruteForceIndex(torch.randn(args.corpus, args.embed_dim))
        self.collator = PretrainCollator(SPECIAL, self.cfg.max_query_length, "salient", seed=0)
        self.num_steps = 0

    def _batch(self) -> RealmBatch:
        """What the data loader hands the loop (built outside the timed region, as the loader does), on the host."""
        a, examples = self.args, []
        for i in range(a.batch):
            start = int(self.rng.integers(0, a.query_len - a.span + 1))
            examples.append(
                {
                    "input_ids": self.rng.integers(5, a.vocab, a.query_len).tolist(),
                    "salient_spans": [[start, start + a.span]],
                    "idx": self.num_steps * a.batch + i,
                    "source_uid_hash": int(self.rng.integers(1, a.corpus + 1)),
                }
            )
        self.num_steps += 1
        return self.collator(examples)

    def __call__(self) -> tuple[dict[str, float], RealmBatch]:
        """One step: ({part: seconds}, the batch with its candidates)."""
        batch, device, model = self._batch().to(self.device), self.device, self.model
        t0 = device_time(device)
        model.eval()  # as the loop: deterministic query embeddings for the search
        with torch.no_grad(), self.autocast:
            query_emb = model.embed_queries(batch)
        model.train()
        t1 = device_time(device)
        batch = retrieve(
            query_emb,
            batch,
            self.index,
            self.store,
            SPECIAL,
            self.cfg,
        )
        batch = batch.to(device)
        t2 = device_time(device)
        t3, t4 = self._train(batch)
        parts = {"search_embed": t1 - t0, "retrieve": t2 - t1, "fwd_bwd": t3 - t2, "optimizer": t4 - t3}
        return {"step": t4 - t0, **parts}, batch

    def _train(self, batch: RealmBatch) -> tuple[float, float]:
        """Forward, backward, clip and AdamW; returns the clock after the backward and after the optimizer."""
        with self.autocast:
            out = train_step(self.model, batch, self.loss_fn)
        out.loss.backward()
        t3 = device_time(self.device)
        nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return t3, device_time(self.device)


class PrefetchedRealmStep(RealmStep):
    """The step with ``train.prefetch_candidates``, through the trainer's ``CandidatePipeline``: the next batch's
    queries are embedded first, then its search and packing run in a worker thread during this batch's forward and
    backward. Same shapes, data and initialisation as ``RealmStep``."""

    def __init__(self, args: argparse.Namespace, c: BertConfig, device: torch.device, autocast: AbstractContextManager):
        super().__init__(args, c, device, autocast)
        self.pipeline = CandidatePipeline(self._start_retrieval, device, prefetch=True)
        self.upcoming: RealmBatch | None = None

    def _start_retrieval(self, batch: RealmBatch, chosen: Tensor | None):
        return start_search(self.model, batch, self.index, self.store, SPECIAL, self.cfg, self.autocast)

    def __call__(self) -> tuple[dict[str, float], RealmBatch]:
        current = self.upcoming or self._batch()
        self.upcoming = self._batch()
        t0 = device_time(self.device)
        batch = next(iter(self.pipeline.batches([current], following=self.upcoming)))
        t2 = device_time(self.device)
        t3, t4 = self._train(batch)
        parts = {"candidates": t2 - t0, "fwd_bwd": t3 - t2, "optimizer": t4 - t3}
        return {"step": t4 - t0, **parts}, batch


class MlmStep:
    """A plain MLM step: ``BertForMaskedLM`` (labels at 15% of positions, logits at all) + backward + clip + AdamW."""

    def __init__(self, c: BertConfig, device: torch.device, autocast: AbstractContextManager, towers: tuple[str, ...]):
        self.c, self.device, self.autocast, self.towers = c, device, autocast, towers
        torch.manual_seed(0)
        self.mlm = BertForMaskedLM(c).to(device)
        self.optimizer, _ = build_optimizer(self.mlm, OptimConfig(lr=1e-4, warmup_steps=0), 1)

    def __call__(self, seqs: dict[str, Seqs]) -> tuple[float, float, int]:
        """Trains on ``seqs`` of ``self.towers`` (one forward per tower); returns (seconds, FLOPs, tokens)."""
        inputs = [tuple(t.to(self.device) for t in seqs[name]) for name in self.towers]
        t0 = device_time(self.device)
        with self.autocast:
            loss = 0.0
            for ids, mask, types in inputs:
                labels = ids.masked_fill((torch.rand(ids.shape, device=self.device) > 0.15) | (mask == 0), -100)
                loss = loss + self.mlm(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels).loss
        loss.backward()
        nn.utils.clip_grad_norm_(self.mlm.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        seconds = device_time(self.device) - t0
        tokens = sum(ids.numel() for ids, _, _ in inputs)  # note: the head runs at every position, padding too
        flops = mlm_head_flops(self.c, tokens) + sum(bert_flops(self.c, *ids.shape) for ids, _, _ in inputs)
        return seconds, flops, tokens


PART_NAMES = {
    "search_embed": "search embed (no_grad)",
    "retrieve": "retrieve (search+packing)",
    "candidates": "candidates, critical path",
    "fwd_bwd": "forward+backward",
    "optimizer": "clip+AdamW",
}


def measure(args: argparse.Namespace) -> dict:
    """Runs the peak, REALM and baseline measurements; returns the figures (what ``--json`` writes)."""
    set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16)
    c = bert_config(args, reader_length(args))
    dtypes = {"fp32": torch.float32, **({"bf16": torch.bfloat16} if args.bf16 else {})}
    peaks = {name: matmul_peak(dt, args.peak_size, device) for name, dt in dtypes.items()}

    # note: the three steps take turns (REALM i, then both baselines on REALM i's tensors), so load that drifts
    # during the run (shared cores) slows every row alike and the ratios stay fair
    realms: dict[str, RealmStep] = {"REALM step": RealmStep(args, c, device, autocast)}
    if args.prefetch:
        realms["REALM step, prefetched"] = PrefetchedRealmStep(args, c, device, autocast)
    baselines = {
        "BERT MLM, reader seqs": MlmStep(c, device, autocast, ("reader",)),
        "BERT MLM, all seqs": MlmStep(c, device, autocast, ("reader", "doc", "query")),
    }
    parts: dict[str, dict[str, list[float]]] = {label: {} for label in realms}
    figures: dict[str, list[tuple[float, float, int]]] = {label: [] for label in [*realms, *baselines]}
    for step in range(args.warmup + args.steps):
        results = {label: realm() for label, realm in realms.items()}
        seqs = step_seqs(results["REALM step"][1])
        measured = {label: run(seqs) for label, run in baselines.items()}
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
    peak = peaks["bf16" if args.bf16 else "fp32"]

    rows: dict[str, dict[str, float]] = {}
    for label, values in figures.items():
        seconds, flops, tokens = (statistics.median(v) for v in zip(*values))
        # note: the ratio is the median of per-step ratios: steps i of both ran back to back under the same load
        ratio = statistics.median(r[0] / v[0] for r, v in zip(figures["REALM step"], values))
        rows[label] = {
            "ms": 1e3 * seconds,
            "steps_s": 1 / seconds,
            "tokens_s": tokens / seconds,
            "gflops_s": flops / seconds / 1e9,
            "mfu": flops / seconds / peak,
            "realm_over_this": ratio,
        }
        # note: a part's row is keyed "step label / part"; the table shows the part, indented under its step
        for key, name in PART_NAMES.items():
            if key in parts.get(label, {}):
                rows[f"{label} / {name}"] = {"ms": 1e3 * statistics.median(parts[label][key])}
    return {
        "args": vars(args),
        "device": str(device),
        "threads": torch.get_num_threads(),
        "seq_shapes": {name: list(s[0].shape) for name, s in seqs.items()},
        "peak_flops": peaks,
        "rows": rows,
    }


def format_table(result: dict) -> str:
    """The shape on top, the peak(s), then one row per step kind (indented rows split the REALM step)."""
    a = result["args"]
    seqs = ", ".join(f"{name} {n}x{length}" for name, (n, length) in result["seq_shapes"].items())
    lines = [
        f"BERT: hidden {a['hidden']}, layers {a['layers']}, heads {a['heads']}, intermediate {a['intermediate']}, "
        f"vocab {a['vocab']} ({'bf16 autocast' if a['bf16'] else 'fp32'}, {result['device']}, "
        f"{result['threads']} threads)",
        f"step: B {a['batch']} queries, K {a['candidates']} slots, {a['span']} masked, corpus {a['corpus']}; "
        f"padded seqs x len: {seqs}; median of {a['steps']} steps after {a['warmup']} warm-up",
    ]
    lines += [
        f"matmul peak ({name} mm {a['peak_size']}^3): {value / 1e9:,.1f} GFLOP/s"
        for name, value in result["peak_flops"].items()
    ]
    lines.append(f"\n{'':28}{'ms/step':>9}{'steps/s':>9}{'tokens/s':>10}{'GFLOP/s':>9}{'MFU':>7}{'REALM/this':>12}")
    for label, row in result["rows"].items():
        line = f"{label if 'mfu' in row else '  ' + label.split(' / ')[-1]:28}{row['ms']:9.1f}"
        if "mfu" in row:
            line += (
                f"{row['steps_s']:9.2f}{row['tokens_s']:10,.0f}{row['gflops_s']:9.2f}{row['mfu']:7.1%}"
                f"{row['realm_over_this']:12.2f}"
            )
        lines.append(line)
    return "\n".join(lines)


def reader_length(args: argparse.Namespace) -> int:
    """The longest reader sequence of the shape flags: ``[CLS] query [SEP] block [SEP]``."""
    return args.query_len + args.block_len + 3


def emit(result: dict, table: str, json_path: str | None) -> None:
    """Prints a benchmark's table and, with ``--json``, writes its figures."""
    print(table)
    if json_path:
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)


def main(argv: list[str] | None = None) -> None:
    args = shape_parser(__doc__.splitlines()[0]).parse_args(argv)
    result = measure(args)
    emit(result, format_table(result), args.json)


if __name__ == "__main__":
    main()
