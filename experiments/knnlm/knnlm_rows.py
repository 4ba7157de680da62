"""``experiments/knnlm/knnlm.py``'s rows 1 to 7 on real text: the LM alone, datastores T and T+U, the sweeps and
datastore sizes, IVF-PQ (seed 001's 2x2 of neighbours and scores, and ANN recall), key types, layers and metrics, and
the learned W_ds (R rows per token, uniform or by frequency). Each row function adds its rows to a ``KnnBench``.

Every ablation is reported at its own settings: k, tau and lambda chosen on V (``realm.knnlm.perplexity.choose``,
articles disjoint from E's), E scored once with them (``report``), with the paired-bootstrap interval of its change
against the LM alone and against the row's reference (the same comparison at the reference's own settings)."""

from __future__ import annotations

import argparse
import dataclasses
import math
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
from realm.knnlm.bootstrap import BootstrapConfig, PairedDifference, paired_bootstrap
from realm.knnlm.cache import cache_neighbours
from realm.knnlm.datastore_build import build_datastore, read_texts
from realm.knnlm.learned import LearnedConfig, learned_neighbours, train_learned
from realm.knnlm.lm import LMConfig, load_causal_lm, num_targets, score_documents, tokenize_documents
from realm.knnlm.tiny_lm import TinyLMConfig
from realm.run import publication
from realm.training.optim import OptimConfig

K, LAM, TAU = 1024, 0.25, 1.0  # the paper's in-domain setting
LAMBDAS, TAUS = (0.1, 0.25, 0.5, 0.65, 0.8), (0.3, 1.0, 3.0, 10.0, 30.0)  # the descriptive sweeps of row 4
KS, SIZES = (8, 32, 128, 512, 1024), (0.1, 0.25, 0.5)
# the grid every tuned row chooses from on V: tau as multiples of the row's own score scale on V (key types' distances
# differ by orders of magnitude, so one fixed list of taus would favour some; a choice on an edge is flagged), lambda
# from a light to a heavy kNN share
TAU_MULTIPLES = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0)
TUNE_LAMBDAS = (0.05, 0.1, 0.25, 0.4, 0.55, 0.7, 0.85)
PAPER = f"k {K}, lambda {LAM}, tau 1, L2, Flat, ffn_input"
SPEED_REPEATS = 3


def lm_config(args: argparse.Namespace, steps: int, context: int, vocab: int) -> TinyLMConfig:
    """The tiny GPT-2 of the scale options, trained for ``steps`` on windows of ``context`` tokens."""
    optim = OptimConfig(lr=1e-3, warmup_steps=min(100, steps // 10), weight_decay=0.01)
    return TinyLMConfig(
        vocab_size=vocab, hidden_size=args.lm_hidden, num_layers=args.lm_layers, num_heads=4,
        context_length=context, steps=steps, batch_size=16, seed=args.seed, optim=optim,
    )  # fmt: skip


def build(root: Path, lm_cfg: LMConfig, corpus: str, key_type: str = "ffn_input", layer: int = -1) -> ds.Datastore:
    build_datastore(root, lm_cfg, CorpusConfig(path=corpus), ds.DatastoreConfig(key_type=key_type, layer=layer))
    return ds.load_datastore(root)


def derive(src: ds.Datastore, root: Path, rows: np.ndarray, index: IndexConfig, **fields) -> ds.Datastore:
    """A datastore over ``rows`` of ``src``'s keys (a document subset, or another index / metric), published by the
    library; its manifest is the source's with ``fields`` over it."""
    root.mkdir(parents=True, exist_ok=True)
    staging = publication.new_staging(root)
    np.save(staging / ds.KEYS_FILE, np.asarray(src.keys[rows]))
    cfg = ds.DatastoreConfig(key_type=src.manifest["key_type"], layer=src.key_layer, index=index)
    manifest = {**src.manifest, "derived_from": str(src.path), **fields}
    ds.publish_datastore(root, staging, src.values[rows], cfg, manifest)
    return ds.load_datastore(root, IndexConfig(nprobe=index.nprobe))


def scored(model: PreTrainedModel, docs: list[np.ndarray], lm_cfg: LMConfig) -> tuple[torch.Tensor, ...]:
    """(ffn_input keys, targets, LM log-probabilities) of every token of ``docs``, in ``ev.collect``'s order."""
    parts = list(score_documents(model, docs, lm_cfg, "ffn_input"))
    return tuple(torch.cat([getattr(p, name) for p in parts]) for name in ("keys", "targets", "lm_log_probs"))


def label(name: str, store: ds.Datastore) -> str:
    return f"{name} ({store.num_entries:,})"


def tau_grid(on_v: ev.Neighbours) -> tuple[float, ...]:
    """``TAU_MULTIPLES`` of V's median gap between the best neighbour's score and the 32nd's (the spread the softmax
    over neighbours sees), to 3 significant digits."""
    gap = on_v.scores[:, 0] - on_v.scores[:, min(31, on_v.scores.shape[1] - 1)]
    gap = gap[torch.isfinite(gap)]
    scale = float(gap.median()) if len(gap) and float(gap.median()) > 0 else 1.0
    return tuple(float(f"{scale * m:.3g}") for m in TAU_MULTIPLES)


def interval(d: PairedDifference) -> str:
    """``ppl_b / ppl_a [95% interval]``."""
    return f"{d.ppl_b / d.ppl_a:.3f} [{1 + d.ci_low:.3f}, {1 + d.ci_high:.3f}]"


def add_row(rows: list[dict], num: str, row: str, store: str, settings: str, measure: str, value, versus: str,
            **extra) -> None:  # fmt: skip
    """One row of the table (``extra``: the choice, intervals and grids behind it, kept in the JSON)."""
    rows.append({"num": num, "row": row, "datastore": store, "settings": settings, "measure": measure,
                 "value": value, "versus": versus, "reference": "", **extra})  # fmt: skip


@dataclass
class Tuned:
    """One system at its own settings: the choice made on V, and E's per-token log-probabilities with them."""

    chosen: dict
    on_e: torch.Tensor  # [T] interpolated log p of E's tokens
    knn_on_e: torch.Tensor  # [T] log p_kNN of E's tokens


@dataclass
class KnnBench:
    """What the rows read and write: the options, the LM trained on T, every split's tokens, the table's rows, the
    LM-alone figures (row 1), the datastores T and T+U with their neighbours of E and V, the tuned references, the
    ffn_input keys of E and V, and row 5's searches to time (settings, datastore, recompute)."""

    args: argparse.Namespace
    work: Path
    splits: dict[str, dict]
    lm_dir: Path
    lm_cfg: LMConfig
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    docs: dict[str, list[np.ndarray]]
    rows: list[dict]
    base: dict = field(default_factory=dict)
    stores: dict[str, ds.Datastore] = field(default_factory=dict)
    nbs: dict[str, ev.Neighbours] = field(default_factory=dict)
    nbs_v: dict[str, ev.Neighbours] = field(default_factory=dict)
    tuned: dict[str, Tuned] = field(default_factory=dict)
    keys: dict[str, torch.Tensor] = field(default_factory=dict)
    where: dict[str, str] = field(default_factory=dict)
    speeds: list[tuple[str, ds.Datastore, bool]] = field(default_factory=list)

    @classmethod
    def load(cls, args: argparse.Namespace, work: Path, splits: dict[str, dict], lm_dir: Path, rows: list[dict],
             lm_cfg: LMConfig | None = None) -> KnnBench:  # fmt: skip
        """The LM in ``lm_dir`` (the tiny LM of the scale options unless ``lm_cfg`` says otherwise) and every split
        tokenized by it (each split's token count goes into ``splits``), adding to the table ``rows``."""
        lm_cfg = lm_cfg or LMConfig(model=str(lm_dir), context_length=args.context, stride=args.context // 2,
                                    batch_size=32)  # fmt: skip
        model, tokenizer = load_causal_lm(lm_cfg)
        docs = {name: tokenize_documents(tokenizer, read_texts(CorpusConfig(path=s["path"])))
                for name, s in splits.items()}  # fmt: skip
        for name, split in splits.items():
            split["tokens"] = int(num_targets(docs[name]).sum())
        return cls(args, work, splits, lm_dir, lm_cfg, model, tokenizer, docs, rows)

    def add(self, num: str, row: str, store: str, settings: str, measure: str, value, versus: str, **extra) -> None:
        add_row(self.rows, num, row, store, settings, measure, value, versus, **extra)

    def add_ppl(self, num: str, row: str, where: str, settings: str, value: float) -> None:
        """A perplexity of E at settings not chosen on V (the paper's, or a description of E), with its ratio."""
        self.add(num, row, where, settings, "ppl E", value, f"{value / self.base['ppl_lm']:.3f}")

    def collect(self, store: ds.Datastore | None, recompute: bool = False, split: str = "E",
                model: tuple[PreTrainedModel, LMConfig] | None = None) -> ev.Neighbours:  # fmt: skip
        """One LM pass over ``split`` and one search of k = ``K`` neighbours in ``store`` (None: the LM alone), with
        the LM trained on T or ``model`` (another LM with the same vocabulary, and its settings)."""
        lm, lm_cfg = model or (self.model, self.lm_cfg)
        if store is not None:
            ev.check_compatible(lm, store)
        # note: each FAISS call streams every key, so exact search takes 4,096 queries a call (6x faster than the
        # default 256 on this machine); re-scoring keeps 256, which bounds the [queries, k, D] gather of keys
        knn_cfg = ev.KNNConfig(k=K, recompute=recompute, search_batch=256 if recompute else 4096)
        return ev.collect(lm, self.docs[split], lm_cfg, store, knn_cfg)

    def both(self, store: ds.Datastore, recompute: bool = False) -> tuple[ev.Neighbours, ev.Neighbours]:
        """(V's, E's) neighbours in ``store``."""
        return self.collect(store, recompute, "V"), self.collect(store, recompute)

    def add_tuned(self, num: str, row: str, where: str, on_v: ev.Neighbours, on_e: ev.Neighbours,
                  reference: str = "", name: str = "", note: str = "", extra: dict | None = None,
                  splits: tuple[str, str] = ("V", "E")) -> Tuned:  # fmt: skip
        """A row at its own settings: (k, tau, lambda) chosen on V, E reported once, its interval against the LM
        alone, and against ``reference`` (a tuned row's name) when given; kept as ``name`` for later rows.
        ``splits`` names the two sets in the table (row 11 chooses on QV and reports QE)."""
        ks = [k for k in KS if k <= on_v.scores.shape[1]] or [on_v.scores.shape[1]]
        taus = tau_grid(on_v)
        chosen, _ = ev.choose(on_v, ks, taus, TUNE_LAMBDAS)
        grids = (("tau", chosen["tau"], taus), ("lambda", chosen["lambda"], TUNE_LAMBDAS))
        edges = [name for name, value, grid in grids if value in (grid[0], grid[-1])]
        edge = f" ({' and '.join(edges)} at the grid's edge)" if edges else ""
        score, versus_lm = ev.report(on_e, chosen, BootstrapConfig(seed=self.args.seed))
        knn_log = ev.knn_token_log_probs(on_e, chosen["k"], chosen["tau"])
        tuned = Tuned(chosen, knn.interpolate(on_e.lm_log_probs, knn_log, chosen["lambda"]), knn_log)
        settings = (f"k {chosen['k']}, tau {chosen['tau']:.3g}, lambda {chosen['lambda']} (chosen on {splits[0]})"
                    f"{edge}{note}")  # fmt: skip
        found = {"chosen": {key: chosen[key] for key in ("k", "tau", "lambda", "ppl_knnlm")}, "taus": taus,
                 "versus_lm": versus_lm.to_dict(), **(extra or {})}  # fmt: skip
        self.add(num, row, where, settings, f"ppl {splits[1]}", score["ppl_knnlm"], interval(versus_lm), **found)
        if reference:
            d = paired_bootstrap(self.tuned[reference].on_e, tuned.on_e, BootstrapConfig(seed=self.args.seed))
            self.rows[-1].update(reference=f"{reference}: {interval(d)}", versus_reference=d.to_dict())
        if name:
            self.tuned[name] = tuned
        return tuned


def ppl(nb: ev.Neighbours, k: int = K, tau: float = TAU, lam: float = LAM) -> float:
    return ev.score(nb, k, tau, lam)["ppl_knnlm"]


def lm_and_datastores(b: KnnBench) -> None:
    """Rows 1-3: the LM alone, datastore T (its own training data) and T+U, at the paper's settings and at their own
    (chosen on V); T+U's oracle lambda (seed 002's bound on any adaptive interpolation)."""
    a = b.args
    b.base = ev.score(b.collect(None), 1, TAU, 0.0)
    train = publication.read_manifest(b.lm_dir)
    shape = f"{a.lm_hidden}x{a.lm_layers}, ctx {a.context}, stride {a.context // 2}"
    b.add_ppl("1", "LM alone", "-", f"{shape}, {a.lm_steps} steps, train loss {train['final_loss']}", b.base["ppl_lm"])
    b.stores = {"T": build(b.work / "ds" / "T", b.lm_cfg, b.splits["T"]["path"])}
    b.stores["T+U"] = build(b.work / "ds" / "TU", b.lm_cfg, b.splits["TU"]["path"])
    for name, store in b.stores.items():
        b.nbs_v[name], b.nbs[name] = b.both(store)
    b.where = {name: label(name, store) for name, store in b.stores.items()}
    b.add_ppl("2", "kNN-LM, the LM's training data", b.where["T"], PAPER, ppl(b.nbs["T"]))
    for lam in (LAM, 0.65):
        b.add_ppl("3", "kNN-LM, + unseen in-domain", b.where["T+U"], f"k {K}, lambda {lam}, tau 1",
                  ppl(b.nbs["T+U"], lam=lam))  # fmt: skip
    b.add_tuned("2", "kNN-LM, the LM's training data", b.where["T"], b.nbs_v["T"], b.nbs["T"], name="T")
    tu = b.add_tuned("3", "kNN-LM, + unseen in-domain", b.where["T+U"], b.nbs_v["T+U"], b.nbs["T+U"], "T", "T+U")
    oracle = knn.oracle_log_probs(b.nbs["T+U"].lm_log_probs, tu.knn_on_e)
    value = knn.perplexity(-oracle.double().sum().item(), len(oracle))
    settings = f"lambda 0 or 1 per token, knowing the token (k {tu.chosen['k']}, tau {tu.chosen['tau']}): a bound"
    b.add_ppl("3", "oracle lambda (not a system)", b.where["T+U"], settings, value)


def sweeps(b: KnnBench) -> None:
    """Row 4: lambda, tau and k swept for T and for T+U, and the grid's best: a description of E (chosen on it)."""
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
    """Row 4: T+U subsampled by whole documents (its own keys, not a new forward pass), each at its own settings,
    against all of it."""
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
        b.add_tuned("4", "datastore size", label(f"{fraction:.0%} of T+U's documents", store), *b.both(store), "T+U")
    b.add_tuned("4", "datastore size", b.where["T+U"], b.nbs_v["T+U"], b.nbs["T+U"])  # note: the reference itself


def with_scores(nb: ev.Neighbours, scores: torch.Tensor) -> ev.Neighbours:
    """The same neighbours scored otherwise (their order, hence which k are kept, unchanged)."""
    return dataclasses.replace(nb, scores=scores)


def ivf_pq(b: KnnBench) -> None:
    """Row 5: seed 001's 2x2 over T+U's keys, neighbours (IVF-PQ at nprobe 8 and 32, or exact) x scores (the PQ
    codes', or exact from the stored keys), each at its own settings, against Flat; ANN recall@k against exact."""
    n, dim = b.stores["T+U"].num_entries, b.stores["T+U"].keys.shape[1]
    factory = f"IVF{2 ** round(math.log2(math.sqrt(n)))},PQ{max(dim // 16, 1)}"
    derive(b.stores["T+U"], b.work / "ds" / "TU-ivfpq", np.arange(n), IndexConfig(metric="l2", factory=factory))
    exact_v, exact_e = b.nbs_v["T+U"], b.nbs["T+U"]
    for nprobe in (8, 32):
        store = ds.load_datastore(b.work / "ds" / "TU-ivfpq", IndexConfig(nprobe=nprobe))
        for recompute in (False, True):
            on_v, on_e = b.both(store, recompute)
            settings = f"{factory}, nprobe {nprobe}, recompute {recompute}"
            scores = "exact" if recompute else "PQ"
            b.add_tuned("5", f"neighbours IVF-PQ, scores {scores}", b.where["T+U"], on_v, on_e, "T+U",
                        note=f"; {settings}")  # fmt: skip
            b.speeds.append((settings, store, recompute))
            if not recompute:
                recalls = ", ".join(f"@{k} {knn.recall_at_k(on_e.ids, exact_e.ids, k):.3f}" for k in (8, 64, K))
                b.add("5", "ANN recall against exact", b.where["T+U"], f"{factory}, nprobe {nprobe}: {recalls}",
                      "recall@1024", knn.recall_at_k(on_e.ids, exact_e.ids, K), "-")  # fmt: skip
    # note: the exact neighbours scored as PQ scores them; the queries are E's and V's ffn_input keys (T+U's type)
    pq = ds.load_datastore(b.work / "ds" / "TU-ivfpq")
    on_v = with_scores(exact_v, pq.index_scores(b.keys["V"], exact_v.ids))
    on_e = with_scores(exact_e, pq.index_scores(b.keys["E"], exact_e.ids))
    b.add_tuned("5", "neighbours exact, scores PQ", b.where["T+U"], on_v, on_e, "T+U", note=f"; {factory}")
    b.add_tuned("5", "neighbours exact, scores exact", b.where["T+U"], exact_v, exact_e, note="; Flat (the reference)")


def key_types(b: KnnBench) -> None:
    """Row 6: key types (each its own build of T) at the last block, h_sm (the softmax's input), ffn_input at every
    other block, and L2 vs inner product, each at its own settings, against ffn_input / L2 / last block. Each row
    also gives the keys' scale (median squared distance to the nearest entry on E), what a fixed tau depends on."""
    variants = [("ffn_input", -1, "l2"), ("attn_output", -1, "l2"), ("ffn_output", -1, "l2"), ("h_sm", -1, "l2"),
                *(("ffn_input", layer, "l2") for layer in range(b.args.lm_layers - 1)), ("ffn_input", -1, "ip")]
    for key, layer, metric in variants:
        if (key, layer, metric) == ("ffn_input", -1, "l2"):
            on_v, on_e = b.nbs_v["T"], b.nbs["T"]
        elif metric == "ip":
            everything = np.arange(b.stores["T"].num_entries)
            on_v, on_e = b.both(derive(b.stores["T"], b.work / "ds" / "T-ip", everything, IndexConfig(metric="ip")))
        else:
            on_v, on_e = b.both(build(b.work / "ds" / f"T-{key}-{layer}", b.lm_cfg, b.splits["T"]["path"], key, layer))
        where = "last block" if layer == -1 else f"block {layer} of {b.args.lm_layers}"
        scale = f"; scale {-on_e.scores[:, 0].median().item():.3g}" if metric == "l2" else ""
        reference = "" if (key, layer, metric) == ("ffn_input", -1, "l2") else "T"
        b.add_tuned("6", f"key {key}, {where}, metric {metric}", b.where["T"], on_v, on_e, reference, note=scale)


def learned_wds(b: KnnBench) -> None:
    """Row 7: the learned W_ds of Xu et al. trained on T's keys at T's own tau and lambda (``--wds-variants``: R
    rows per token, their allocation, a learning-rate multiple), each then at its own settings like any datastore
    (its top-k rows are its neighbours), against T."""
    keys, targets, lm_log = scored(b.model, b.docs["T"], b.lm_cfg)
    chosen = b.tuned["T"].chosen
    lm_only = {"V": b.nbs_v["T"], "E": b.nbs["T"]}  # note: the same tokens and LM figures; only neighbours change
    for rows, allocation, lr_scale in b.args.wds_variants:
        cfg = LearnedConfig(rows_per_token=rows, allocation=allocation, k=K, tau=chosen["tau"],
                            lambda_=chosen["lambda"], steps=b.args.wds_steps, batch_size=512)  # fmt: skip
        cfg.lr *= lr_scale
        module, history = train_learned(keys, targets, lm_log, len(b.tokenizer), cfg)
        on = {}
        for split, nb in lm_only.items():
            scores, values = learned_neighbours(module, b.keys[split], K)
            on[split] = dataclasses.replace(nb, scores=scores, values=values.to(torch.int32),
                                            ids=torch.full_like(values, -1))  # fmt: skip
        sizes = f"W_ds {module.num_parameters:,} parameters vs T's {b.stores['T'].keys.size:,} numbers"
        note = f"; trained at tau {cfg.tau}, lambda {cfg.lambda_}, lr x{lr_scale}: NLL {history[0]} -> {history[-1]}"
        b.add_tuned("7", f"learned W_ds, R {rows}, {allocation}", sizes, on["V"], on["E"], "T", note=note,
                    extra={"wds_history": history})  # fmt: skip


def query_keys(b: KnnBench) -> None:
    """E's and V's ffn_input keys, in ``collect``'s token order (the queries rows 5 and 7 score themselves)."""
    for split in ("V", "E"):
        keys, targets, _ = scored(b.model, b.docs[split], b.lm_cfg)
        if not torch.equal(targets, b.nbs["T"].targets if split == "E" else b.nbs_v["T"].targets):
            raise RuntimeError(f"{split}'s keys are not in the evaluation's token order")
        b.keys[split] = keys


def cache_baseline(b: KnnBench) -> None:
    """Row 3: the continuous cache of Grave et al. (``realm.knnlm.cache``, each document's own earlier tokens keyed
    by the same ffn_input states, no datastore) at its own settings, against the LM alone and T+U."""
    on = {}
    for split, nb in (("V", b.nbs_v["T"]), ("E", b.nbs["T"])):
        scores, values = cache_neighbours(b.keys[split], nb.targets, nb.docs, K)
        on[split] = dataclasses.replace(nb, scores=scores, values=values.to(torch.int32),
                                        ids=torch.full_like(values, -1))  # fmt: skip
    b.add_tuned("3", "continuous cache (Grave et al.), no datastore", "E's own earlier tokens", on["V"], on["E"],
                "T+U")  # fmt: skip


STAGES = (
    ("1-3 LM alone, datastores T and T+U, cache", (lm_and_datastores, query_keys, cache_baseline)),
    ("4 sweeps and datastore sizes", (sweeps, datastore_sizes)),
    ("5 IVF-PQ", (ivf_pq,)),
    ("6 key types, layers and metric", (key_types,)),
    ("7 learned W_ds", (learned_wds,)),
)
"""The timed stages of rows 1-7, in order (each reads what the ones before it left in the ``KnnBench``; row 8,
``knnlm_speed.py``, times the searches row 5 leaves in ``KnnBench.speeds``)."""
