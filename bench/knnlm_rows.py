"""``bench/knnlm.py``'s rows 1 to 8 on real text: the LM alone, datastores T and T+U, the sweeps and datastore sizes,
IVF-PQ, key types and metrics, the learned W_ds, and speeds. Each row function adds its rows to a ``KnnBench``."""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from realm.data.corpus import CorpusConfig
from realm.index.mips import IndexConfig
from realm.knnlm import datastore as ds
from realm.knnlm import knn
from realm.knnlm import perplexity as ev
from realm.knnlm.bootstrap import BootstrapConfig, paired_bootstrap
from realm.knnlm.datastore_build import build_datastore, read_texts
from realm.knnlm.learned import LearnedConfig, learned_log_probs, train_learned
from realm.knnlm.lm import LMConfig, load_causal_lm, num_targets, score_documents, tokenize_documents, window_batches
from realm.knnlm.tiny_lm import TinyLMConfig
from realm.run import publication
from realm.training.optim import OptimConfig

K, LAM, TAU = 1024, 0.25, 1.0  # the paper's in-domain setting
LAMBDAS, TAUS = (0.1, 0.25, 0.5, 0.65, 0.8), (0.3, 1.0, 3.0, 10.0, 30.0)
KS, SIZES = (8, 32, 128, 512, 1024), (0.1, 0.25, 0.5)
PAPER = f"k {K}, lambda {LAM}, tau 1, L2, Flat, ffn_input"


def lm_config(args: argparse.Namespace, steps: int, context: int, vocab: int) -> TinyLMConfig:
    """The tiny GPT-2 of the scale options, trained for ``steps`` on windows of ``context`` tokens."""
    optim = OptimConfig(lr=1e-3, warmup_steps=min(100, steps // 10), weight_decay=0.01)
    return TinyLMConfig(
        vocab_size=vocab, hidden_size=args.lm_hidden, num_layers=args.lm_layers, num_heads=4,
        context_length=context, steps=steps, batch_size=16, seed=args.seed, optim=optim,
    )  # fmt: skip


def build(root: Path, lm_cfg: LMConfig, corpus: str, key_type: str = "ffn_input") -> ds.Datastore:
    build_datastore(root, lm_cfg, CorpusConfig(path=corpus), ds.DatastoreConfig(key_type=key_type))
    return ds.load_datastore(root)


def derive(src: ds.Datastore, root: Path, rows: np.ndarray, index: IndexConfig, **fields) -> ds.Datastore:
    """A datastore over ``rows`` of ``src``'s keys (a document subset, or another index / metric), published by the
    library; its manifest is the source's with ``fields`` over it."""
    root.mkdir(parents=True, exist_ok=True)
    staging = publication.new_staging(root)
    np.save(staging / ds.KEYS_FILE, np.asarray(src.keys[rows]))
    cfg = ds.DatastoreConfig(key_type=src.manifest["key_type"], index=index)
    manifest = {**src.manifest, "derived_from": str(src.path), **fields}
    ds.publish_datastore(root, staging, src.values[rows], cfg, manifest)
    return ds.load_datastore(root, IndexConfig(nprobe=index.nprobe))


def bare_forward_seconds(model: PreTrainedModel, docs: list[np.ndarray], lm_cfg: LMConfig) -> float:
    """A plain ``model(input_ids, attention_mask)`` over the windows and batches ``score_documents`` makes."""
    started = time.perf_counter()
    with torch.inference_mode():
        for _, inputs in window_batches(model, docs, lm_cfg):
            model(**inputs)
    return time.perf_counter() - started


def scored(model: PreTrainedModel, docs: list[np.ndarray], lm_cfg: LMConfig) -> tuple[torch.Tensor, ...]:
    """(ffn_input keys, targets, LM log-probabilities) of every token of ``docs``."""
    parts = list(score_documents(model, docs, lm_cfg, "ffn_input"))
    return tuple(torch.cat([getattr(p, name) for p in parts]) for name in ("keys", "targets", "lm_log_probs"))


def label(name: str, store: ds.Datastore) -> str:
    return f"{name} ({store.num_entries:,})"


@dataclass
class KnnBench:
    """What the rows read and write: the options, the LM trained on T, every split's tokens, the table's rows, the
    LM-alone figures (row 1), the datastores T and T+U with their neighbours of E, and row 5's search speeds."""

    args: argparse.Namespace
    work: Path
    splits: dict[str, dict]
    lm_dir: Path
    lm_cfg: LMConfig
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    docs: dict[str, list[np.ndarray]]
    rows: list[dict] = field(default_factory=list)
    base: dict = field(default_factory=dict)
    stores: dict[str, ds.Datastore] = field(default_factory=dict)
    nbs: dict[str, ev.Neighbours] = field(default_factory=dict)
    where: dict[str, str] = field(default_factory=dict)
    speeds: list[tuple[str, float]] = field(default_factory=list)

    @classmethod
    def load(cls, args: argparse.Namespace, work: Path, splits: dict[str, dict], lm_dir: Path) -> KnnBench:
        """The LM in ``lm_dir`` and every split tokenized by it (each split's token count goes into ``splits``)."""
        lm_cfg = LMConfig(model=str(lm_dir), context_length=args.context, stride=args.context // 2, batch_size=32)
        model, tokenizer = load_causal_lm(lm_cfg)
        docs = {name: tokenize_documents(tokenizer, read_texts(CorpusConfig(path=s["path"])))
                for name, s in splits.items()}  # fmt: skip
        for name, split in splits.items():
            split["tokens"] = int(num_targets(docs[name]).sum())
        return cls(args, work, splits, lm_dir, lm_cfg, model, tokenizer, docs)

    def add(self, num: str, row: str, store: str, settings: str, measure: str, value, versus: str) -> None:
        self.rows.append({"num": num, "row": row, "datastore": store, "settings": settings, "measure": measure,
                          "value": value, "versus": versus})  # fmt: skip

    def add_ppl(self, num: str, row: str, where: str, settings: str, value: float) -> None:
        """A perplexity of E, with its ratio to the LM alone."""
        self.add(num, row, where, settings, "ppl E", value, f"{value / self.base['ppl_lm']:.3f}")

    def collect(self, store: ds.Datastore | None, recompute: bool = False, split: str = "E") -> ev.Neighbours:
        """One LM pass over ``split`` and one search of k = ``K`` neighbours in ``store`` (None: the LM alone)."""
        if store is not None:
            ev.check_compatible(self.model, store)
        # note: each FAISS call streams every key, so exact search takes 4,096 queries a call (6x faster than the
        # default 256 on this machine); re-scoring keeps 256, which bounds the [queries, k, D] gather of keys
        knn_cfg = ev.KNNConfig(k=K, recompute=recompute, search_batch=256 if recompute else 4096)
        return ev.collect(self.model, self.docs[split], self.lm_cfg, store, knn_cfg)


def ppl(nb: ev.Neighbours, k: int = K, tau: float = TAU, lam: float = LAM) -> float:
    return ev.score(nb, k, tau, lam)["ppl_knnlm"]


def lm_and_datastores(b: KnnBench) -> None:
    """Rows 1-3: the LM alone, datastore T (its own training data) and T+U, at the paper's settings and with tau and
    lambda chosen on V (with the interval of their change over E's tokens)."""
    a = b.args
    b.base = ev.score(b.collect(None), 1, TAU, 0.0)
    train = publication.read_manifest(b.lm_dir)
    shape = f"{a.lm_hidden}x{a.lm_layers}, ctx {a.context}, stride {a.context // 2}"
    b.add_ppl("1", "LM alone", "-", f"{shape}, {a.lm_steps} steps, train loss {train['final_loss']}", b.base["ppl_lm"])
    b.stores = {"T": build(b.work / "ds" / "T", b.lm_cfg, b.splits["T"]["path"])}
    b.stores["T+U"] = build(b.work / "ds" / "TU", b.lm_cfg, b.splits["TU"]["path"])
    b.nbs = {name: b.collect(store) for name, store in b.stores.items()}
    b.where = {name: label(name, store) for name, store in b.stores.items()}
    b.add_ppl("2", "kNN-LM, the LM's training data", b.where["T"], PAPER, ppl(b.nbs["T"]))
    for lam in (LAM, 0.65):
        b.add_ppl("3", "kNN-LM, + unseen in-domain", b.where["T+U"], f"k {K}, lambda {lam}, tau 1",
                  ppl(b.nbs["T+U"], lam=lam))  # fmt: skip
    # note: tau and lambda chosen on V (articles disjoint from E's), perplexity reported on E with its interval
    for num, name, row in (("2", "T", "kNN-LM, the LM's training data"), ("3", "T+U", "kNN-LM, + unseen in-domain")):
        on_v = ev.best(ev.sweep(b.collect(b.stores[name], split="V"), [K], TAUS, LAMBDAS))
        settings = f"k {K}, tau {on_v['tau']}, lambda {on_v['lambda']} (chosen on V: {on_v['ppl_knnlm']:.2f})"
        nb = b.nbs[name]
        d = paired_bootstrap(nb.lm_log_probs, ev.token_log_probs(nb, K, on_v["tau"], on_v["lambda"])[1],
                             BootstrapConfig(seed=b.args.seed))  # fmt: skip
        versus = f"{d.ppl_b / d.ppl_a:.3f} [{1 + d.ci_low:.3f}, {1 + d.ci_high:.3f}]"
        b.add(num, row, b.where[name], settings, "ppl E", d.ppl_b, versus)


def sweeps(b: KnnBench) -> None:
    """Row 4: lambda, tau and k swept for T and for T+U, and the grid's best."""
    for name, nb in b.nbs.items():
        grid = ev.sweep(nb, [k for k in KS if k <= nb.scores.shape[1]], TAUS, LAMBDAS)
        at = {(r["k"], r["tau"], r["lambda"]): r["ppl_knnlm"] for r in grid}
        for lam in LAMBDAS:
            b.add_ppl("4", "sweep lambda", b.where[name], f"lambda {lam} (k {K}, tau 1)", at[K, TAU, lam])
        for tau in TAUS:
            b.add_ppl("4", "sweep tau", b.where[name], f"tau {tau} (k {K}, lambda {LAM})", at[K, tau, LAM])
        best = ev.best(grid)
        settings = f"tau {best['tau']}, k {best['k']}, lambda {best['lambda']} (chosen on E: optimistic)"
        b.add_ppl("4", "sweep: best of the grid", b.where[name], settings, best["ppl_knnlm"])
        for k in (k for k in KS if (k, TAU, LAM) in at):
            b.add_ppl("4", "sweep k", b.where[name], f"k {k} (tau 1, lambda {LAM})", at[k, TAU, LAM])


def datastore_sizes(b: KnnBench) -> None:
    """Row 4: T+U subsampled by whole documents (its own keys, not a new forward pass), against all of it."""
    counts = num_targets(b.docs["TU"])
    starts = np.concatenate([[0], np.cumsum(counts)])
    order = np.random.default_rng(b.args.seed).permutation(len(counts))
    for fraction in SIZES:
        chosen = np.sort(order[: max(1, round(fraction * len(counts)))])
        subset = [b.docs["TU"][i] for i in chosen]
        entries = np.concatenate([np.arange(starts[i], starts[i + 1]) for i in chosen])
        if not np.array_equal(b.stores["T+U"].values[entries], ds.values_of(subset)):
            raise RuntimeError("the datastore's rows are not its documents' tokens in order")
        store = derive(b.stores["T+U"], b.work / "ds" / f"TU-{fraction}", entries, IndexConfig(metric="l2"),
                       num_documents=len(subset), corpus_sha256=ds.tokens_fingerprint(subset))  # fmt: skip
        name = label(f"{fraction:.0%} of T+U's documents", store)
        b.add_ppl("4", "datastore size", name, PAPER, ppl(b.collect(store)))
    b.add_ppl("4", "datastore size", b.where["T+U"], PAPER, ppl(b.nbs["T+U"]))


def ivf_pq(b: KnnBench) -> None:
    """Row 5: IVF-PQ over T+U's keys at nprobe 8 and 32, with and without exact re-scoring, against Flat."""
    n, dim = b.stores["T+U"].num_entries, b.stores["T+U"].keys.shape[1]
    factory = f"IVF{2 ** round(math.log2(math.sqrt(n)))},PQ{max(dim // 16, 1)}"
    derive(b.stores["T+U"], b.work / "ds" / "TU-ivfpq", np.arange(n), IndexConfig(metric="l2", factory=factory))
    for nprobe in (8, 32):
        store = ds.load_datastore(b.work / "ds" / "TU-ivfpq", IndexConfig(nprobe=nprobe))
        for recompute in (False, True):
            s = ev.score(b.collect(store, recompute), K, TAU, LAM)
            settings = f"{factory}, nprobe {nprobe}, recompute {recompute}"
            b.add_ppl("5", "approximate search", b.where["T+U"], settings, s["ppl_knnlm"])
            b.speeds.append((settings, s["knnlm_tokens_per_s"]))
    b.add_ppl("5", "exact search", b.where["T+U"], "Flat", ppl(b.nbs["T+U"]))


def key_types(b: KnnBench) -> None:
    """Row 6: key types ffn_input / attn_output / ffn_output (each its own build of T) and L2 vs inner product."""
    for key, metric in (("ffn_input", "l2"), ("attn_output", "l2"), ("ffn_output", "l2"), ("ffn_input", "ip")):
        if (key, metric) == ("ffn_input", "l2"):
            nb = b.nbs["T"]
        elif metric == "ip":
            everything = np.arange(b.stores["T"].num_entries)
            nb = b.collect(derive(b.stores["T"], b.work / "ds" / "T-ip", everything, IndexConfig(metric="ip")))
        else:
            nb = b.collect(build(b.work / "ds" / f"T-{key}", b.lm_cfg, b.splits["T"]["path"], key))
        best = ev.best(ev.sweep(nb, [min(K, nb.scores.shape[1])], TAUS, [LAM]))
        settings = f"k {K}, lambda {LAM}, tau 1 (best tau on E {best['tau']}: {best['ppl_knnlm']:.2f})"
        b.add_ppl("6", f"key {key}, metric {metric}", b.where["T"], settings, ppl(nb))


def learned_wds(b: KnnBench) -> None:
    """Row 7: the learned W_ds of Xu et al. trained on T's keys, and its parameter count."""
    keys, targets, lm_log = scored(b.model, b.docs["T"], b.lm_cfg)
    cfg = LearnedConfig(k=K, tau=TAU, lambda_=LAM, steps=b.args.wds_steps, batch_size=512)
    module, _ = train_learned(keys, targets, lm_log, len(b.tokenizer), cfg)
    keys_e, targets_e, lm_e = scored(b.model, b.docs["E"], b.lm_cfg)
    mixed = knn.interpolate(lm_e, learned_log_probs(module, keys_e, targets_e, K, TAU), LAM)
    sizes = f"W_ds: {module.num_parameters:,} parameters vs T's {b.stores['T'].keys.size:,} numbers"
    settings = f"{b.args.wds_steps} steps, R 1, k {K}, lambda {LAM}, tau 1"
    b.add_ppl("7", "learned W_ds (Xu et al.)", sizes, settings, knn.perplexity(-mixed.double().sum().item(), len(lm_e)))


def speeds(b: KnnBench) -> None:
    """Row 8: evaluation tokens/s with and without a datastore, and the build's against a bare forward over T."""
    lm_speed = b.base["lm_tokens_per_s"]
    flat = ev.score(b.nbs["T+U"], K, TAU, LAM)["knnlm_tokens_per_s"]
    for settings, speed in [("LM alone", lm_speed), ("Flat", flat), *b.speeds]:
        store = "-" if settings == "LM alone" else b.where["T+U"]
        b.add("8", "evaluation speed", store, settings, "tok/s", speed, f"{speed / lm_speed:.3f}")
    bare = bare_forward_seconds(b.model, b.docs["T"], b.lm_cfg)
    manifest, n_t = b.stores["T"].manifest, b.stores["T"].num_entries
    for what, seconds in (
        ("bare model(input_ids) over T's windows", bare),
        ("build: keys (hook, fp16 shard)", manifest["key_seconds"]),
        ("whole build (load, tokenize, keys, Flat, publish)", manifest["build_seconds"]),
    ):
        b.add("8", "datastore build speed", b.where["T"], what, "tok/s", n_t / seconds, f"{bare / seconds:.3f}")


STAGES = (
    ("1-3 LM alone, datastores T and T+U", (lm_and_datastores,)),
    ("4 sweeps and datastore sizes", (sweeps, datastore_sizes)),
    ("5 IVF-PQ", (ivf_pq,)),
    ("6 key types and metric", (key_types,)),
    ("7 learned W_ds", (learned_wds,)),
    ("8 speed", (speeds,)),
)
"""The timed stages of rows 1-8, in order (each reads what the ones before it left in the ``KnnBench``)."""
