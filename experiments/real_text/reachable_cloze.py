"""Reachable held-out cloze (issue 55 item 2a): sentences whose masked fact is stated in another article's block that
the sentence names, found on a corpus, counted, and with ``--run`` evaluated zero-shot on a pre-trained run.

    python -m experiments.real_text.reachable_cloze --corpus ../shared/data/real/wikipedia_vital10k/summaries_en-us.json \\
        --out runs/reachable [--sentences RUN/cloze/pretrain.jsonl] [--tagger spacy] [--run RUN] [--json F]
    python -m experiments.real_text.reachable_cloze --blocks RUN/blocks --out runs/reachable ...

Writes ``reachable_strict.jsonl``, ``reachable_loose.jsonl`` (``realm.pretrain.reachable_cloze``: what strict and
loose mean), ``heldout_sentences.txt`` (what no training stage may read) and, given X (``--sentences``), X without
them as ``pretrain.jsonl``. ``--corpus`` cuts the Vital leads (json_object, ``extract``) into blocks with
``--tokenizer`` (default all-MiniLM-L6-v2's) at ``--max-block-length`` (128, the real-text pre-training configs'),
so the lead block is the article's first 128 wordpieces; ``--blocks`` reads a run's blocks instead. With ``--run``
each set is read by the run's model: span accuracy with retrieval (the sentence's own article never retrieved) and
closed book, the gold article's recall at 1 and k, and each item's outcome (for per-item McNemar tests).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.harness import minilm_path, write_json  # noqa: E402 isort:skip  (first: no hub, no W&B)

import numpy as np  # noqa: E402

from realm.core.logging import init_logging  # noqa: E402
from realm.data.blocks import build_blocks_from_config, load_blocks  # noqa: E402
from realm.data.corpus import CorpusConfig  # noqa: E402
from realm.data.tagging import TaggingConfig, build_tagger  # noqa: E402
from realm.index.mips import BruteForceIndex  # noqa: E402
from realm.models.pretrained import model_tokenizer  # noqa: E402
from realm.pretrain.data import prepared_sentences  # noqa: E402
from realm.pretrain.heldout_eval import embed_corpus, gold_block_ids, gold_hits, heldout_outcomes  # noqa: E402
from realm.pretrain.reachable_cloze import ReachableClozeConfig, write_reachable_cloze  # noqa: E402
from realm.pretrain.saved_run import LoadedRun, load_run  # noqa: E402


def add_corpus_arguments(parser: argparse.ArgumentParser) -> None:
    """``--blocks`` or ``--corpus`` (with ``--tokenizer`` and ``--max-block-length``): the knowledge corpus."""
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--blocks", help="a saved blocks folder (e.g. a run's blocks/)")
    where.add_argument("--corpus", help="a json_object corpus of lead sections (the Vital summaries' format)")
    parser.add_argument("--tokenizer", default=None, help="cuts --corpus into blocks (default: all-MiniLM-L6-v2's)")
    parser.add_argument("--max-block-length", type=int, default=128)


def corpus_blocks(args: argparse.Namespace, out: Path):
    """The blocks ``--blocks`` names, or ``--corpus`` cut into blocks under ``out/blocks``."""
    if args.blocks:
        return load_blocks(args.blocks)
    tokenizer = model_tokenizer(args.tokenizer or str(minilm_path()))
    corpus = CorpusConfig(path=args.corpus, format="json_object", text_field="extract",
                          max_block_length=args.max_block_length)  # fmt: skip
    return load_blocks(build_blocks_from_config(corpus, tokenizer, out / "blocks"))


def evaluate_cloze(run_dir: Path, files: dict[str, Path], checkpoint: str | None = None) -> dict[str, dict]:
    """Each cloze file read by the run's newest model (or ``checkpoint``'s): ``evaluate_loaded``."""
    return evaluate_loaded(load_run(run_dir, checkpoint), files)


def evaluate_loaded(run: LoadedRun, files: dict[str, Path]) -> dict[str, dict]:
    """Each cloze file read by ``run``'s model (on its device): ``items``, span accuracy with retrieval and closed
    book, gold recall at 1 and k (when every item names its gold article in ``entity``) and the per-item outcomes."""
    cfg, run_dir = run.cfg, run.run_dir
    index = BruteForceIndex(embed_corpus(run.model.retriever.doc_embedder, run.store.blocks, run.special,
                                         cfg.retriever.max_block_length))  # fmt: skip
    table = {}
    for name, path in files.items():
        rows = prepared_sentences(str(path), run.tokenizer, None, cfg.retriever.max_query_length, run_dir / "data")
        # note: an answer cut by the query length leaves no mask; the collator would drop the row and misalign titles
        kept = [i for i, (start, _) in enumerate(rows["gold_span"]) if start >= 0]
        rows = rows.select(kept)
        out = heldout_outcomes(run.model, rows, run.store, run.special, cfg.retriever, index=index,
                               batch_size=cfg.eval.batch_size)  # fmt: skip
        entities = _field(path, "entity", kept)
        row = {"items": len(kept), "span_accuracy": float(out.span_correct.mean()) if kept else None,
               "closed_book_span_accuracy": float(out.closed_book_span_correct.mean()) if kept else None,
               "k": cfg.retriever.num_retrieved, "span_correct": out.span_correct.astype(int).tolist(),
               "closed_book_span_correct": out.closed_book_span_correct.astype(int).tolist()}  # fmt: skip
        if kept and all(entities):
            first, anywhere = gold_hits(out.retrieved, gold_block_ids(run.store, entities))
            row |= {"gold_recall_at_1": float(np.mean(first)), "gold_recall_at_k": float(np.mean(anywhere))}
        table[name] = row
    return {"run": str(run_dir), "step": run.step, "sets": table}


def _field(path: Path, field: str, rows: list[int]) -> list[str]:
    """``field`` of the listed rows of a jsonl file ("" where absent)."""
    values = [json.loads(line).get(field) or "" for line in path.read_text(encoding="utf-8").splitlines() if line]
    return [values[i] for i in rows]


def print_evaluation(result: dict) -> None:
    print(f"{result['run']} (step {result['step']})")
    print("| set | items | with retrieval | closed book | gold recall@1 | gold recall@k |")
    print("|---|---|---|---|---|---|")
    for name, row in result["sets"].items():
        cells = [row.get(k) for k in ("span_accuracy", "closed_book_span_accuracy", "gold_recall_at_1",
                                      "gold_recall_at_k")]  # fmt: skip
        print(f"| {name} | {row['items']} | " + " | ".join("-" if c is None else f"{c:.3f}" for c in cells) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_corpus_arguments(parser)
    parser.add_argument("--out", required=True)
    parser.add_argument("--sentences", default=None, help="X (jsonl) to rewrite without the held-out sentences")
    parser.add_argument("--tagger", choices=("spacy", "rule"), default="spacy")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-span-articles", type=int, default=ReachableClozeConfig().max_span_articles,
                        help="a span stated by more articles is no item (0: no limit)")
    parser.add_argument("--run", default=None, help="a pre-trained run to evaluate on the strict and loose sets")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    init_logging()
    out = Path(args.out)
    blocks = corpus_blocks(args, out)
    sets = write_reachable_cloze(blocks, out, build_tagger(TaggingConfig(kind=args.tagger)),
                                 ReachableClozeConfig(seed=args.seed, max_span_articles=args.max_span_articles), args.sentences)  # fmt: skip
    print(f"{len(blocks)} blocks, {sets.num_sentences} sentences, {sets.num_linking} name another article: "
          f"{sets.num_strict} strict items, {sets.num_loose} loose items (strict included); "
          f"{sets.num_pretrain_skipped} sentences of X skipped")  # fmt: skip
    result = {"blocks": len(blocks), "sentences": sets.num_sentences, "linking": sets.num_linking,
              "strict": sets.num_strict, "loose": sets.num_loose, "pretrain_skipped": sets.num_pretrain_skipped}
    if args.run:
        result["evaluation"] = evaluate_cloze(Path(args.run), {"strict": sets.strict, "loose": sets.loose})
        print_evaluation(result["evaluation"])
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
