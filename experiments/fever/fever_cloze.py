"""FEVER SUPPORTS spans as cloze (issue 55 item 2b): SUPPORTS claims of FEVER whose evidence pages are in the corpus,
one salient span masked, counted on a corpus with each skip's reason and, with ``--run``, read zero-shot by a
pre-trained run with retrieval and closed book.

    python -m experiments.fever.fever_cloze --corpus ../shared/data/real/wikipedia_vital10k/summaries_en-us.json \\
        --out runs/fever_cloze [--fever ../shared/data/real/fever/paper_dev.jsonl] [--tagger spacy|rule] [--seed 0] \\
        [--max-span-articles 10] [--run RUN] [--json F]

Writes ``fever_supports.jsonl`` (one item per claim: the endpoint) and ``fever_supports_spans.jsonl`` (every qualifying
span); ``experiments.fever.cloze_items`` says which spans qualify. ``--corpus``/``--blocks`` as in
``experiments/common/cloze_eval.py``; ``experiments/real_text/realm_stage.py`` reads the items file as any other
endpoint (``--cloze fever=OUT/fever_supports.jsonl``, left out of ``--primary``: a secondary endpoint).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.harness import REPO, write_json  # noqa: E402 isort:skip  (first: no hub, no W&B)

from experiments.common.cloze_eval import (  # noqa: E402
    add_corpus_arguments, corpus_blocks, evaluate_cloze, print_evaluation,
)

from realm.core.logging import init_logging  # noqa: E402
from realm.data.tagging import TaggingConfig, build_tagger  # noqa: E402
from experiments.fever.cloze_items import SPAN_SKIPS, FeverClozeConfig, write_fever_cloze  # noqa: E402
from experiments.common.title_links import corpus_articles  # noqa: E402

FEVER = REPO.parent / "shared" / "data" / "real" / "fever" / "paper_dev.jsonl"


def format_counts(counts: dict[str, int]) -> str:
    """The claims followed from the file to the items, then the salient spans by why they are no item."""
    c = counts
    return "\n".join([
        f"{c['records']} FEVER claims read ({c['not_enough_info']} NOT ENOUGH INFO); {c['supports']} SUPPORTS",
        f"- evidence page outside the corpus: {c['supports_outside_corpus']}",
        f"- every evidence page in the corpus: {c['claims']}",
        f"  - no salient span: {c['no_salient_span']}",
        f"  - no qualifying span: {c['no_qualifying_span']}",
        f"  - items (one per claim): {c['items']}",
        f"{c['spans']} salient spans of those {c['claims']} claims: {c['qualifying_spans']} qualify; "
        + ", ".join(f"{reason} {c[reason]}" for reason in SPAN_SKIPS),
    ])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_corpus_arguments(parser)
    parser.add_argument("--out", required=True)
    parser.add_argument("--fever", default=str(FEVER), help="a FEVER jsonl (paper_dev's format)")
    parser.add_argument("--tagger", choices=("spacy", "rule"), default="spacy")
    parser.add_argument("--seed", type=int, default=0, help="chooses each claim's span among its qualifying ones")
    parser.add_argument("--max-span-articles", type=int, default=FeverClozeConfig().max_span_articles,
                        help="a span stated by more articles is no item (0: no limit)")
    parser.add_argument("--run", default=None, help="a pre-trained run to evaluate on the items and every span")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if not Path(args.fever).is_file():
        parser.error(f"--fever: no file {args.fever}")
    init_logging()
    out = Path(args.out)
    articles = corpus_articles(corpus_blocks(args, out))
    made = write_fever_cloze(args.fever, articles, out, build_tagger(TaggingConfig(kind=args.tagger)),
                             FeverClozeConfig(seed=args.seed, max_span_articles=args.max_span_articles))  # fmt: skip
    print(f"{len(articles)} articles; {made.items}")
    print(format_counts(made.counts))
    result: dict = {"articles": len(articles), **made.counts}
    if args.run:
        result["evaluation"] = evaluate_cloze(Path(args.run), {"fever": made.items, "fever spans": made.spans})
        print_evaluation(result["evaluation"])
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
