"""Is the held-out cloze held down by reading or by retrieval? For each held-out sentence of a pre-training run, whether
its masked span occurs in any of the k blocks it reads (its own block is never one), and the span accuracy of the
sentences whose span is there against those whose span is not.

    python -m experiments.real_text.heldout_reachability --run runs/roq/scratch/seed0 [--ks 4 8 16] [--max-examples 1000] [--json F]

Rows: the run's final model reading its own dense top-k, and the same model reading BM25's top-k over wordpieces of the
masked sentence (``bm25_retrieval``: the lexical baseline of the held-out column), each at every k of ``--ks`` (the
model reads k blocks and the null document; default: the run's own k). A span counts as present when its text occurs in
the block's ``title text`` on word boundaries (``contains_answer``), so a present span is one the reader could copy; the
closed-book column is the null document alone. No assertions: figures for experiments/real_text/RESULTS.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from benchmarks.harness import write_json  # noqa: E402 isort:skip  (first: no hub, no W&B)

import numpy as np  # noqa: E402

from realm.core.logging import init_logging  # noqa: E402
from realm.index.mips import BruteForceIndex  # noqa: E402
from realm.index.text_bm25 import titled_texts  # noqa: E402
from realm.pretrain.data import prepared_sentences  # noqa: E402
from realm.pretrain.heldout_eval import HeldoutOutcomes, bm25_retrieval, embed_corpus, heldout_outcomes  # noqa: E402
from realm.pretrain.retrieval_table import contains_answer, contains_normalized, normalized_for_search  # noqa: E402
from realm.pretrain.saved_run import load_run  # noqa: E402


def span_present(retrieved: np.ndarray, spans: list[str], texts: list[str]) -> np.ndarray:
    """[N] whether row i's span occurs in any of its retrieved blocks (``retrieved[i]``; -1: an empty slot)."""
    present = [any(b >= 0 and contains_answer(texts[b], span) for b in row) for row, span in zip(retrieved, spans)]
    return np.array(present, dtype=bool)


def span_elsewhere(spans: list[str], own: list[str], texts: list[str], titles: list[str]) -> np.ndarray:
    """[N] whether row i's span occurs in any block of another article than its own (title ``own[i]``): the most
    that any retriever could put in front of the reader, its own article being excluded."""
    searched = [normalized_for_search(t) for t in texts]  # note: once, not once per span
    found = [any(contains_normalized(t, span) for t, tt in zip(searched, titles) if tt != title)
             for span, title in zip(spans, own)]  # fmt: skip
    return np.array(found, dtype=bool)


def reachability_row(out: HeldoutOutcomes, present: np.ndarray) -> dict[str, float]:
    """Span accuracy split by whether the span was in a read block; ``*_absent`` is what reading cannot explain."""
    def share(mask: np.ndarray, values: np.ndarray) -> float | None:
        return float(values[mask].mean()) if mask.any() else None

    return {"sentences": int(len(present)), "span_present": float(present.mean()),
            "accuracy": float(out.span_correct.mean()), "closed_book": float(out.closed_book_span_correct.mean()),
            "accuracy_present": share(present, out.span_correct), "accuracy_absent": share(~present, out.span_correct),
            "closed_book_present": share(present, out.closed_book_span_correct),
            "closed_book_absent": share(~present, out.closed_book_span_correct)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="a pre-training run (e.g. a `realm real-text` output folder)")
    parser.add_argument("--ks", type=int, nargs="+", default=None, help="blocks read per sentence (default: the run's)")
    parser.add_argument("--max-examples", type=int, default=None, help="default: the run's eval.max_examples")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    init_logging()
    run = load_run(Path(args.run))
    cfg = run.cfg
    rows = prepared_sentences(cfg.data.heldout, run.tokenizer, None, cfg.retriever.max_query_length,
                              Path(args.run) / "data")  # fmt: skip
    rows = rows.select(range(min(args.max_examples or cfg.eval.max_examples or len(rows), len(rows))))
    spans = [run.tokenizer.decode(ids[a:b]) for ids, (a, b) in zip(rows["input_ids"], rows["gold_span"])]
    texts = titled_texts(run.store.blocks["title"], run.store.blocks["text"])
    bm25, vectors = bm25_retrieval(run.store, run.special, len(run.tokenizer), run.tokenizer.unk_token_id)
    titles = run.store.blocks["title"]
    title_of = dict(zip(run.store.blocks["uid"], titles))
    elsewhere = span_elsewhere(spans, [title_of.get(uid) for uid in rows["source_uid"]], texts, titles)
    dense = BruteForceIndex(embed_corpus(run.model.retriever.doc_embedder, run.store.blocks, run.special,
                                         cfg.retriever.max_block_length))  # fmt: skip
    table = {}
    for k in args.ks or [cfg.retriever.num_retrieved]:
        shape = dataclasses.replace(cfg.retriever, num_candidates=k + 1)  # note: k blocks and the null document
        for name, retrieval in (("dense", {"index": dense}), ("bm25", {"index": bm25, "query_vectors": vectors})):
            out = heldout_outcomes(run.model, rows, run.store, run.special, shape, batch_size=cfg.eval.batch_size,
                                   **retrieval)  # fmt: skip
            table[f"{name} k={k}"] = reachability_row(out, span_present(out.retrieved, spans, texts))
    print(f"{args.run} (step {run.step}, trained at k {cfg.retriever.num_retrieved}): {len(spans)} sentences, the "
          f"span in another article's block for {elsewhere.mean():.3f} of them")
    print("| retrieval | span in a read block | accuracy | if present | if absent | closed book | if present "
          "| if absent |")
    print("|---|---|---|---|---|---|---|---|")
    for name, row in table.items():
        cells = [row[key] for key in ("span_present", "accuracy", "accuracy_present", "accuracy_absent",
                                      "closed_book", "closed_book_present", "closed_book_absent")]  # fmt: skip
        print(f"| {name} | " + " | ".join("-" if c is None else f"{c:.3f}" for c in cells) + " |")
    write_json(args.json, {"run": args.run, "step": run.step, "trained_k": cfg.retriever.num_retrieved,
                           "span_elsewhere": float(elsewhere.mean()), "rows": table})
    return 0


if __name__ == "__main__":
    sys.exit(main())
