"""Salient spans on real text (issue 28): spaCy NER throughput over the Wikipedia Vital 10k summaries, and what the
dependency-free rule tagger misses against it on a seeded sample of sentences.

    OMP_NUM_THREADS=1 python -m experiments.real_text.tagging [--corpus PATH] [--docs N] [--sample 300] [--seed 0]
    [--examples 3]
        [--json PATH]
    OMP_NUM_THREADS=1 python -m experiments.real_text.tagging --workers 1,2 [--kind spacy] [--repeat R] [--shard-size N]
    [--json PATH]

With ``--workers`` it measures the tagging stage instead (``realm.data.tag_stage``, what ``realm tag`` runs): the
corpus's sentences (repeated ``--repeat`` times) as a jsonl, tokenised and tagged into a fresh cache once per worker
count, with the wall seconds, sentences/s, speed-up over the first count and peak RSS of the calling process and of
its largest worker; every count must give the same rows (the issue's target: 2 processes >= 1.8x faster than 1).

The documents are read as ``realm blocks --format json_object --text-field extract`` reads them and cut into
sentences with ``split_sentences``. Both taggers run single-process over every sentence (spaCy as
``build_tagger(TaggingConfig(kind="spacy"))`` builds it: NER only, names and dates). spaCy's spans are the reference
(REALM's salient spans: named entities and dates); a rule span matches one only with the same characters, labels
aside. On the sample spaCy also runs with its numeric labels, to say which rule spans it tags as CARDINAL and the
like. About 2 minutes for the whole corpus on one shared CPU core.
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
import tempfile
import time
from collections import Counter
from itertools import islice
from pathlib import Path
from typing import Any

from benchmarks.harness import write_json  # noqa: E402 isort:skip  (first: no hub, no W&B)
from realm.data.corpus import read_json_object  # noqa: E402
from realm.data.sentences import split_sentences  # noqa: E402
from realm.data.tagging import (  # noqa: E402
    SPACY_NUMERIC_LABELS,
    RuleTagger,
    SpacyTagger,
    Span,
    SpanTagger,
    TaggingConfig,
    build_tagger,
)

VITAL = Path("/work/shared/data/real/wikipedia_vital10k/summaries_en-us.json")
STAGE_QUERY_LENGTH = 64
"""``retriever.max_query_length`` of the stage benchmark (the base config's)."""


def load_sentences(path: Path, num_docs: int | None) -> tuple[int, list[str]]:
    """(documents read, their sentences) of the first ``num_docs`` documents (all when None)."""
    docs = list(islice(read_json_object(path, title_field="title", text_field="extract"), num_docs))
    return len(docs), [doc.text[a:b] for doc in docs for a, b in split_sentences(doc.text)]


def timed_tag(tagger: SpanTagger, texts: list[str]) -> tuple[list[list[Span]], float]:
    """The tagger's spans of ``texts`` and the wall seconds they took."""
    start = time.perf_counter()
    spans = tagger.tag(texts)
    return spans, time.perf_counter() - start


def throughput(texts: list[str], spans: list[list[Span]], seconds: float) -> dict[str, float]:
    """Sentences/s, words/s (whitespace words), spans per sentence and the share of sentences with a span."""
    num_words = sum(len(text.split()) for text in texts)
    return {
        "sentences": len(texts), "words": num_words, "seconds": seconds,
        "sentences_per_s": len(texts) / seconds, "words_per_s": num_words / seconds,
        "spans_per_sentence": sum(map(len, spans)) / len(texts),
        "share_with_span": sum(1 for s in spans if s) / len(texts),
    }  # fmt: skip


def _overlap(a: Span, b: Span) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def match_counts(references: list[list[Span]], predictions: list[list[Span]]) -> dict[str, Any]:
    """Span-level agreement of ``predictions`` with ``references`` (one span list per sentence each).

    A prediction matches exactly when its ``(start, end)`` is a reference's, labels aside; a reference is found
    partially when any prediction overlaps it (an exact match counts too).

    Returns:
        ``reference``, ``predicted``, ``exact``, ``partial`` counts; ``precision``, ``recall``, ``partial_recall``;
        ``by_reference_label`` ``{label: {"n", "exact", "partial"}}`` and ``by_predicted_label`` ``{label: {"n",
        "exact"}}``, both sorted by label.
    """
    by_ref: dict[str, Counter] = {}
    by_pred: dict[str, Counter] = {}
    for refs, preds in zip(references, predictions, strict=True):
        ref_ranges = {(s, e) for s, e, _ in refs}
        pred_ranges = {(s, e) for s, e, _ in preds}
        for span in refs:
            row = by_ref.setdefault(span[2], Counter())
            row.update(n=1, exact=int(span[:2] in pred_ranges), partial=int(any(_overlap(span, p) for p in preds)))
        for span in preds:
            by_pred.setdefault(span[2], Counter()).update(n=1, exact=int(span[:2] in ref_ranges))
    num_ref, num_pred = (sum(c["n"] for c in rows.values()) for rows in (by_ref, by_pred))
    exact, partial = sum(c["exact"] for c in by_ref.values()), sum(c["partial"] for c in by_ref.values())
    return {
        "reference": num_ref, "predicted": num_pred, "exact": exact, "partial": partial,
        "precision": exact / num_pred if num_pred else 0.0, "recall": exact / num_ref if num_ref else 0.0,
        "partial_recall": partial / num_ref if num_ref else 0.0,
        "by_reference_label": {k: {f: by_ref[k][f] for f in ("n", "exact", "partial")} for k in sorted(by_ref)},
        "by_predicted_label": {k: {f: by_pred[k][f] for f in ("n", "exact")} for k in sorted(by_pred)},
    }  # fmt: skip


def missed_spans(references: list[list[Span]], predictions: list[list[Span]]) -> list[tuple[int, Span, str]]:
    """``(sentence, reference span, "partial" | "none")`` of every reference span no prediction matches exactly:
    "partial" when a prediction overlaps it (a boundary disagreement), "none" when nothing does."""
    missed = []
    for i, (refs, preds) in enumerate(zip(references, predictions, strict=True)):
        pred_ranges = {(s, e) for s, e, _ in preds}
        for span in refs:
            if span[:2] not in pred_ranges:
                missed.append((i, span, "partial" if any(_overlap(span, p) for p in preds) else "none"))
    return missed


def extra_spans(
    references: list[list[Span]], predictions: list[list[Span]], context: list[list[Span]]
) -> list[tuple[int, Span, str]]:
    """``(sentence, predicted span, why)`` of every prediction that matches no reference span exactly.

    ``why`` is, in this order: "boundary" (it overlaps a reference span), the label of an overlapping ``context``
    span (spaCy's CARDINAL, ORDINAL, ... on the same sentence), "sentence-initial" (it starts the sentence) or
    "no entity".
    """
    extras = []
    for i, (refs, preds, ctx) in enumerate(zip(references, predictions, context, strict=True)):
        ref_ranges = {(s, e) for s, e, _ in refs}
        for span in preds:
            if span[:2] in ref_ranges:
                continue
            near = [c[2] for c in ctx if _overlap(span, c)]
            why = "boundary" if any(_overlap(span, r) for r in refs) else near[0] if near else None
            extras.append((i, span, why or ("sentence-initial" if span[0] == 0 else "no entity")))
    return extras


def _example(text: str, span: Span, width: int = 50) -> str:
    start, end, _ = span
    left, right = text[max(0, start - width) : start], text[end : end + width]
    return f"`{text[start:end]}` in …{left}[{text[start:end]}]{right}…".replace("\n", " ")


def grouped_examples(found: list[tuple[int, Span, str]], key: Any, texts: list[str], k: int) -> dict[str, list[str]]:
    """Up to ``k`` examples of each ``key(span, why)`` group, groups by falling count."""
    counts = Counter(key(span, why) for _, span, why in found)
    out: dict[str, list[str]] = {group: [] for group, _ in counts.most_common()}
    for i, span, why in found:
        if len(out[key(span, why)]) < k:
            out[key(span, why)].append(_example(texts[i], span))
    return out


def print_report(result: dict[str, Any], examples: dict[str, dict[str, list[str]]]) -> None:
    spacy, rule = result["throughput"]["spacy"], result["throughput"]["rule"]
    print(f"## Throughput ({result['docs']} documents, {spacy['sentences']} sentences, {spacy['words']} words, "
          "one process)\n")  # fmt: skip
    print("| tagger | seconds | sentences/s | words/s | spans/sentence | sentences with a span |")
    print("|---|---|---|---|---|---|")
    for name, row in (("spaCy NER", spacy), ("rule", rule)):
        print(f"| {name} | {row['seconds']:.1f} | {row['sentences_per_s']:.0f} | {row['words_per_s']:.0f} | "
              f"{row['spans_per_sentence']:.2f} | {row['share_with_span']:.3f} |")  # fmt: skip
    print(f"\nspaCy/rule time: {spacy['seconds'] / rule['seconds']:.1f}x; spaCy model load "
          f"{result['spacy_load_s']:.1f} s (not in its seconds)\n")  # fmt: skip
    names = {"sample": "sample", "all": "all sentences"}
    for name, title in names.items():
        c = result[name]
        name_date = [v for k, v in c["by_predicted_label"].items() if k != "NUMBER"]
        precision = sum(v["exact"] for v in name_date) / max(1, sum(v["n"] for v in name_date))
        print(f"- Rule vs spaCy, {title} ({c['sentences']} sentences): {c['reference']} spaCy spans, {c['predicted']} "
              f"rule spans, exact precision {c['precision']:.3f} ({precision:.3f} without NUMBER), exact recall "
              f"{c['recall']:.3f}, partial-overlap recall {c['partial_recall']:.3f}")  # fmt: skip
    print("\n## spaCy spans by label\n\n| label | sample: spans | rule exact | rule overlaps | missed entirely "
          "| all: spans | exact recall | overlap recall |\n|---|---|---|---|---|---|---|---|")  # fmt: skip
    everywhere = result["all"]["by_reference_label"]
    for label, row in sorted(everywhere.items(), key=lambda kv: -kv[1]["n"]):
        row, cell = result["sample"]["by_reference_label"].get(label, {"n": 0, "exact": 0, "partial": 0}), row
        print(f"| {label} | {row['n']} | {row['exact']} | {row['partial']} | {row['n'] - row['partial']} | "
              f"{cell['n']} | {cell['exact'] / cell['n']:.3f} | {cell['partial'] / cell['n']:.3f} |")  # fmt: skip
    print("\n## Rule spans spaCy does not have (sample)\n\n| rule label / why | spans |\n|---|---|")
    for group, n in result["extras"].items():
        print(f"| {group} | {n} |")
    for title, groups in (("spaCy spans the rule tagger misses", "missed"), ("Rule-only spans", "extra")):
        print(f"\n## {title}: examples\n")
        for group, lines in examples[groups].items():
            print(f"- {group}: " + "; ".join(lines))


def stage_scaling(
    texts: list[str], workers: list[int], tagging: TaggingConfig, tokenizer: Any, shard_size: int, folder: Path
) -> list[dict[str, Any]]:
    """One row per worker count: the tagging stage over ``texts`` into a fresh cache under ``folder``. Raises
    ``RuntimeError`` when two counts give different rows (they must not)."""
    import json

    from realm.data.tag_stage import TagJob, TagStageConfig, tagged_sentences

    source = folder / "sentences.jsonl"
    source.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts), encoding="utf-8")
    rows, first = [], None
    for i, n in enumerate(workers):
        job = TagJob(source=source, target=folder / f"cache-{i}-{n}", tokenizer=tokenizer, tagger=tagging,
                     max_query_length=STAGE_QUERY_LENGTH)  # fmt: skip
        start = time.perf_counter()
        tagged = tagged_sentences(job, TagStageConfig(num_workers=n, shard_size=shard_size))
        seconds = time.perf_counter() - start
        if first is None:
            first = tagged
        elif not tagged.data.table.equals(first.data.table):
            raise RuntimeError(f"{n} workers gave other rows than {workers[0]}")
        rows.append({
            "workers": n, "sentences": len(tagged), "seconds": seconds, "sentences_per_s": len(tagged) / seconds,
            "speedup": rows[0]["seconds"] / seconds if rows else 1.0,
            # note: ru_maxrss is in KiB on Linux; the children's figure is the largest worker so far
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "peak_worker_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        })  # fmt: skip
    return rows


def main_stage(args: argparse.Namespace) -> int:
    """``--workers``: the tagging stage's wall time against its worker count."""
    from realm.data.vocab import load_tokenizer, train_wordpiece

    num_docs, texts = load_sentences(args.corpus, args.docs)
    texts = texts * args.repeat
    workers = [int(n) for n in args.workers.split(",")]
    shard_size = args.shard_size or max(1000, len(texts) // (4 * max(workers)))
    with tempfile.TemporaryDirectory(prefix="bench-tag-stage-") as tmp:
        tokenizer = (load_tokenizer(args.tokenizer) if args.tokenizer
                     else train_wordpiece(texts[:50_000], 8000, Path(tmp) / "tok"))  # fmt: skip
        rows = stage_scaling(texts, workers, TaggingConfig(kind=args.kind), tokenizer, shard_size, Path(tmp))
    print(f"## Tagging stage ({args.kind}): {len(texts)} sentences of {num_docs} documents x {args.repeat}, "
          f"shards of {shard_size} lines\n")  # fmt: skip
    print("| workers | seconds | sentences/s | speed-up | peak RSS MiB (caller) | peak RSS MiB (largest worker) |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['workers']} | {row['seconds']:.1f} | {row['sentences_per_s']:.0f} | {row['speedup']:.2f}x | "
              f"{row['peak_rss_mib']:.0f} | {row['peak_worker_rss_mib']:.0f} |")  # fmt: skip
    write_json(args.json, {"corpus": str(args.corpus), "docs": num_docs, "repeat": args.repeat, "kind": args.kind,
                           "shard_size": shard_size, "rows": rows})  # fmt: skip
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=VITAL, help="a json_object file with title and extract")
    parser.add_argument("--docs", type=int, default=None, help="only the first N documents")
    parser.add_argument("--sample", type=int, default=300, help="sentences compared span by span")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--examples", type=int, default=3, help="examples per miss group")
    parser.add_argument("--json", default=None)
    parser.add_argument("--workers", default=None, help="e.g. 1,2: time the tagging stage at these worker counts")
    parser.add_argument("--kind", choices=("rule", "spacy"), default="spacy", help="tagger of --workers")
    parser.add_argument("--repeat", type=int, default=1, help="the corpus's sentences this many times (--workers)")
    parser.add_argument("--shard-size", type=int, default=None, help="lines per shard (--workers; default: 4/worker)")
    parser.add_argument("--tokenizer", default=None, help="tokenizer folder (--workers; default: trained here)")
    args = parser.parse_args(argv)
    if args.workers:
        return main_stage(args)
    num_docs, texts = load_sentences(args.corpus, args.docs)
    rule_spans, rule_s = timed_tag(RuleTagger(), texts)
    start = time.perf_counter()
    cfg = TaggingConfig(kind="spacy")
    spacy_tagger = build_tagger(cfg)
    load_s = time.perf_counter() - start
    spacy_spans, spacy_s = timed_tag(spacy_tagger, texts)
    picked = sorted(random.Random(args.seed).sample(range(len(texts)), min(args.sample, len(texts))))
    sample = [texts[i] for i in picked]
    refs, preds = [spacy_spans[i] for i in picked], [rule_spans[i] for i in picked]
    numeric = SpacyTagger(cfg.spacy_model, batch_size=cfg.batch_size, enable_numeric=True).tag(sample)
    context = [[s for s in spans if s[2] in SPACY_NUMERIC_LABELS] for spans in numeric]
    missed, extras = missed_spans(refs, preds), extra_spans(refs, preds, context)
    result = {
        "corpus": str(args.corpus), "docs": num_docs, "seed": args.seed, "spacy_load_s": load_s,
        "throughput": {"spacy": throughput(texts, spacy_spans, spacy_s), "rule": throughput(texts, rule_spans, rule_s)},
        "sample": {"sentences": len(picked), **match_counts(refs, preds)},
        "all": {"sentences": len(texts), **match_counts(spacy_spans, rule_spans)},
        "extras": dict(Counter(f"{span[2]}/{why}" for _, span, why in extras).most_common()),
    }  # fmt: skip
    examples = {
        "missed": grouped_examples(missed, lambda span, why: f"{span[2]}/{why}", sample, args.examples),
        "extra": grouped_examples(extras, lambda span, why: f"{span[2]}/{why}", sample, args.examples),
    }
    print_report(result, examples)
    write_json(args.json, {**result, "examples": examples})
    return 0


if __name__ == "__main__":
    sys.exit(main())
