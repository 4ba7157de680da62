"""Reachable held-out cloze (issue 55 item 2a): sentences whose masked fact is stated in another article's block that
the sentence names, found on a corpus, counted, and with ``--run`` evaluated zero-shot on a pre-trained run.

    python -m experiments.real_text.reachable_cloze --corpus ../shared/data/real/wikipedia_vital10k/summaries_en-us.json \\
        --out runs/reachable [--sentences RUN/cloze/pretrain.jsonl] [--tagger spacy] [--run RUN] [--json F]
    python -m experiments.real_text.reachable_cloze --blocks RUN/blocks --out runs/reachable ...

Writes ``reachable_strict.jsonl``, ``reachable_loose.jsonl`` (``experiments.real_text.reachable_items``: what strict and
loose mean), ``heldout_sentences.txt`` (what no training stage may read) and, given X (``--sentences``), X without
them as ``pretrain.jsonl``. ``--corpus`` cuts the Vital leads (json_object, ``extract``) into blocks with
``--tokenizer`` (default all-MiniLM-L6-v2's) at ``--max-block-length`` (128, the real-text pre-training configs'),
so the lead block is the article's first 128 wordpieces; ``--blocks`` reads a run's blocks instead. With ``--run``
each set is read by the run's model: span accuracy with retrieval (the sentence's own article never retrieved) and
closed book, the gold article's recall at 1 and k, and each item's outcome (for per-item McNemar tests).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.harness import write_json  # noqa: E402 isort:skip  (first: no hub, no W&B)

from experiments.common.cloze_eval import (  # noqa: E402
    add_corpus_arguments, corpus_blocks, evaluate_cloze, print_evaluation,
)
from realm.core.logging import init_logging  # noqa: E402
from realm.data.tagging import TaggingConfig, build_tagger  # noqa: E402
from experiments.real_text.reachable_items import ReachableClozeConfig, write_reachable_cloze  # noqa: E402


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
