"""``experiments/knnlm/knnlm.py``'s row 8: evaluation tokens/s with and without a datastore (the exact T+U and row 5's
IVF-PQ searches, each the median of alternated passes beside the LM alone), and the datastore build's against a bare
forward over T."""

from __future__ import annotations

import time

import numpy as np
import torch
from experiments.knnlm.knnlm_rows import LAM, SPEED_REPEATS, TAU, K, KnnBench
from transformers import PreTrainedModel

from realm.knnlm import datastore as ds
from realm.knnlm import perplexity as ev
from realm.knnlm.lm import LMConfig, window_batches


def bare_forward_seconds(model: PreTrainedModel, docs: list[np.ndarray], lm_cfg: LMConfig) -> float:
    """A plain ``model(input_ids, attention_mask)`` over the windows and batches ``score_documents`` makes."""
    started = time.perf_counter()
    with torch.inference_mode():
        for _, inputs in window_batches(model, docs, lm_cfg):
            model(**inputs)
    return time.perf_counter() - started


def timed(b: KnnBench, store: ds.Datastore, recompute: bool) -> tuple[float, float]:
    """(LM alone, with ``store``) tokens/s over E, each the median of ``SPEED_REPEATS`` passes, the two alternated so
    that both see the same load of the (shared) machine: their ratio is what the table reports."""
    alone, knn_lm = [], []
    for _ in range(SPEED_REPEATS):
        alone.append(ev.score(b.collect(None), 1, TAU, 0.0)["lm_tokens_per_s"])
        knn_lm.append(ev.score(b.collect(store, recompute), K, TAU, LAM)["knnlm_tokens_per_s"])
    return float(np.median(alone)), float(np.median(knn_lm))


def speeds(b: KnnBench) -> None:
    """Row 8: evaluation tokens/s with and without a datastore (medians of alternated passes), and the build's
    against a bare forward over T."""
    for settings, store, recompute in [("Flat", b.stores["T+U"], False), *b.speeds]:
        alone, speed = timed(b, store, recompute)
        b.add("8", "evaluation speed", b.where["T+U"], f"{settings} (LM alone beside it: {alone:,.0f} tok/s)",
              "tok/s", speed, f"{speed / alone:.3f}")  # fmt: skip
    bare = bare_forward_seconds(b.model, b.docs["T"], b.lm_cfg)
    manifest, n_t = b.stores["T"].manifest, b.stores["T"].num_entries
    for what, seconds in (
        ("bare model(input_ids) over T's windows", bare),
        ("build: keys (hook, fp16 shard)", manifest["key_seconds"]),
        ("whole build (load, tokenize, keys, Flat, publish)", manifest["build_seconds"]),
    ):
        b.add("8", "datastore build speed", b.where["T"], what, "tok/s", n_t / seconds, f"{bare / seconds:.3f}")
