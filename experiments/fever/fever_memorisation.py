"""The memorisation question on real pages: FEVER claims verified by a model that memorised their evidence pages,
closed book, against the REALM model that retrieves them.

The 686 SUPPORTS/REFUTES claims of FEVER's paper_dev split whose every evidence page is among the Wikipedia Vital lead
sections (``experiments.fever.claims``) are asked of a finished real-text pre-training run (``realm real-text``, its
``pretrain`` stage, e.g. ``runs/real_text``): its corpus, vocabulary, retriever and final encoder. Each claim is
verified by fill-in (``experiments.fever.verification``): SUPPORTS when the model reproduces every salient span of the
claim, masked one at a time, else REFUTES; no verification training, nothing tuned.

- ``memoriser@N``: the run's reader warm-up encoder (REALM pre-training's own start) trained closed book (``realm
  warmup --task.closed_book=true``) on every salient span of every sentence of the evidence pages' blocks, in chunks,
  until it reproduces them (span accuracy ``--target``, 0.95) and has trained as long as the run's REALM
  pre-training did (so one of its chunks sits at REALM's compute), or ``--max-steps``; each chunk's claims asked
  closed book;
- ``memorise_then_retrieve``: the final memoriser reading the blocks the run's retriever finds;
- ``realm``: the run's model reading its retriever's top-k (the corpus embedded by its final document tower); its
  closed book (the null document alone); ``realm_bm25``: it reading BM25's top-k; ``realm_gold_page`` and
  ``memoriser_gold_page``: each reading the claim's evidence page itself (the reader's share, retrieval set aside);
- ``start``: the warm-up encoder before either; ``majority``: every claim judged the more frequent label.

Compute is wall seconds of training on this machine (the run's ``summary.json`` ``stage_seconds.pretrain_s`` for
REALM; the memoriser's chunks add up, evaluation not counted): run it with nothing else on the cores.

    python -m experiments.fever.fever_memorisation --run runs/real_text [--fever ../shared/data/real/fever/paper_dev.jsonl]
        [--out runs/fever_memorisation] [--chunk 300] [--max-steps 6000] [--target 0.95] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.harness import REPO, BenchError, write_json  # noqa: E402 isort:skip  (first: no hub, no W&B network)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from experiments.common.memoriser import (  # noqa: E402
    checkpoint_encoder, memorise, memoriser_config, table_lines, verdict,
)

from realm.core.logging import init_logging  # noqa: E402
from realm.data.cloze_sets import every_span_sentences  # noqa: E402
from experiments.fever.claims import SUPPORTS, claim_records, read_fever_claims  # noqa: E402
from realm.data.tagging import build_tagger  # noqa: E402
from realm.index.mips import BruteForceIndex  # noqa: E402
from realm.models.encoder import KnowledgeAugmentedEncoder  # noqa: E402
from experiments.fever.verification import supported, verification_accuracy  # noqa: E402
from realm.pretrain.data import prepared_sentences  # noqa: E402
from realm.pretrain.heldout_eval import (  # noqa: E402
    bm25_retrieval,
    embed_corpus,
    gold_block_ids,
    gold_hits,
    heldout_outcomes,
)
from realm.pretrain.model import RealmModel  # noqa: E402
from realm.pretrain.saved_run import LoadedRun, load_run  # noqa: E402

FEVER = REPO.parent / "shared/data/real/fever/paper_dev.jsonl"
WARMUP_RECIPE = REPO / "configs/real_text/warmup/default.yaml"


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def gold_page_retrieval(block_titles: list[str], row_titles: list[str]) -> dict:
    """``index`` and ``query_vectors`` for ``heldout_outcomes`` that retrieve each row's evidence page: a block is
    the one-hot vector of its page among the rows' pages (zero for the rest of the corpus), a row the one-hot of its
    own, so the page's blocks score 1 and come first (the reader's diagnosis: what it does with the right page)."""
    column = {title: i for i, title in enumerate(sorted(set(row_titles)))}
    blocks = torch.zeros(len(block_titles), len(column))
    for block, title in enumerate(block_titles):
        if title in column:
            blocks[block, column[title]] = 1.0
    rows = torch.nn.functional.one_hot(torch.tensor([column[t] for t in row_titles]), len(column)).float()
    return {"index": BruteForceIndex(blocks), "query_vectors": lambda batch: rows[batch.example_ids.cpu()]}


class Probe:
    """Asks an encoder, with the run's retriever, the claims (closed book and over a retrieval) and the evidence
    pages' own sentences (closed book: what it memorised)."""

    def __init__(self, run: LoadedRun, claims_file: Path, pages_file: Path, claim_of_row: list[int],
                 is_supported: np.ndarray, cache: Path) -> None:  # fmt: skip
        self.run, self.claim_of_row, self.is_supported = run, claim_of_row, is_supported
        length = run.cfg.retriever.max_query_length
        self.claims = prepared_sentences(str(claims_file), run.tokenizer, None, length, cache)
        self.pages = prepared_sentences(str(pages_file), run.tokenizer, None, length, cache)
        titles = [json.loads(r)["title"] for r in claims_file.read_text().splitlines()]
        self.gold = gold_block_ids(run.store, titles)
        self.dense = BruteForceIndex(embed_corpus(run.model.retriever.doc_embedder, run.store.blocks, run.special,
                                                  run.cfg.retriever.max_block_length))  # fmt: skip
        self.gold_page = gold_page_retrieval(run.store.blocks["title"], titles)

    def _outcomes(self, encoder: KnowledgeAugmentedEncoder, rows, **retrieval):
        model = RealmModel(self.run.model.retriever, encoder)
        return heldout_outcomes(model, rows, self.run.store, self.run.special, self.run.cfg.retriever,
                                batch_size=self.run.cfg.eval.batch_size, **retrieval)  # fmt: skip

    def _verdicts(self, span_correct: np.ndarray, name: str) -> dict[str, float]:
        judged = supported(span_correct, self.claim_of_row, len(self.is_supported))
        figures = verification_accuracy(judged, self.is_supported)
        figures["span_accuracy"] = float(span_correct.mean())
        figures["span_accuracy_supports"] = float(span_correct[self.is_supported[self.claim_of_row]].mean())
        return {f"{name}_{key}": value for key, value in figures.items()}

    def _pages(self, encoder: KnowledgeAugmentedEncoder) -> dict[str, float]:
        out = self._outcomes(encoder, self.pages, index=self.dense)
        return {"pages_closed_book": float(out.closed_book_span_correct.mean())}

    def _claims(self, encoder: KnowledgeAugmentedEncoder, *, closed_book: bool, retrieved: bool, index=None,
                query_vectors=None) -> dict[str, float]:  # fmt: skip
        # note: one pass gives both the null slot's and the retrieved blocks' outcomes
        out = self._outcomes(encoder, self.claims, index=self.dense if index is None else index,
                             query_vectors=query_vectors)  # fmt: skip
        figures = self._verdicts(out.closed_book_span_correct, "closed_book") if closed_book else {}
        if retrieved:
            figures |= self._verdicts(out.span_correct, "retrieved")
            figures["evidence_page_recall_at_k"] = float(gold_hits(out.retrieved, self.gold)[1].mean())
        return figures

    def closed_book(self, encoder: KnowledgeAugmentedEncoder) -> dict[str, float]:
        """What the encoder recalls alone: the pages' spans and the claims."""
        return self._pages(encoder) | self._claims(encoder, closed_book=True, retrieved=False)

    def reading(self, encoder: KnowledgeAugmentedEncoder, **retrieval) -> dict[str, float]:
        """The claims read over ``retrieval`` (``index``, ``query_vectors``; the run's dense index by default)."""
        return self._claims(encoder, closed_book=False, retrieved=True, **retrieval)

    def __call__(self, encoder: KnowledgeAugmentedEncoder) -> dict[str, float]:
        return self._pages(encoder) | self._claims(encoder, closed_book=True, retrieved=True)


def spans_in_page(run: LoadedRun, rows: list[dict], is_supported: np.ndarray) -> str:
    """How many SUPPORTS claims' spans occur in their evidence page's text (case aside): the share a reader that
    copies from the right page could fill in."""
    text: dict[str, str] = {}
    for title, body in zip(run.store.blocks["title"], run.store.blocks["text"]):
        text[title] = text.get(title, "") + " " + body.lower()
    asked = [r for r in rows if is_supported[r["claim"]]]
    found = sum(r["text"][r["answer_start"] : r["answer_end"]].lower() in text.get(r["title"], "") for r in asked)
    return f"SUPPORTS claims' spans found in their evidence page: {found} of {len(asked)}"


def realm_pretrain_seconds(run_dir: Path) -> float:
    summary = run_dir / "summary.json"
    seconds = json.loads(summary.read_text()).get("stage_seconds", {}).get("pretrain_s") if summary.is_file() else None
    if seconds is None:
        raise BenchError(f"{summary} gives no stage_seconds.pretrain_s: pass a run written by `realm real-text`")
    return float(seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", default="runs/real_text", help="a `realm real-text` output folder")
    parser.add_argument("--fever", default=str(FEVER))
    parser.add_argument("--out", default="runs/fever_memorisation")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chunk", type=int, default=300, help="memoriser steps between evaluations")
    parser.add_argument("--max-steps", type=int, default=6000, help="the memoriser's budget (its schedule's length)")
    parser.add_argument("--target", type=float, default=0.95, help="span accuracy on the evidence pages' sentences")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.chunk < 1 or args.max_steps < args.chunk:
        parser.error("--chunk must be >= 1 and --max-steps >= --chunk")
    init_logging()
    run_dir, out = Path(args.run), Path(args.out)
    run = load_run(run_dir)
    warmed = run.cfg.train.init_encoder
    if not warmed or not Path(warmed).is_dir():
        raise BenchError(f"{run_dir}: train.init_encoder {warmed!r} (the reader warm-up encoder) is not a folder")
    claims, _ = read_fever_claims(args.fever, set(run.store.blocks["title"]))
    tagger = build_tagger(run.cfg.data.tagging)
    rows = claim_records(claims, tagger)
    pages = {page for claim in claims for page in claim.pages}
    files = {"claims": write_jsonl(out / "data/claims.jsonl", rows),
             "pages": write_jsonl(out / "data/pages.jsonl", every_span_sentences(run.store.blocks, pages, tagger))}
    is_supported = np.array([c.label == SUPPORTS for c in claims])
    probe = Probe(run, files["claims"], files["pages"], [r["claim"] for r in rows], is_supported, out / "cache")
    majority = max(is_supported.mean(), 1 - is_supported.mean())
    table = {"majority": {"closed_book_accuracy": float(majority)}}
    table["start"] = {"steps": 0, **probe(KnowledgeAugmentedEncoder.from_pretrained(warmed).eval())}
    table["realm"] = {"steps": run.step, "train_s": realm_pretrain_seconds(run_dir), **probe(run.model.encoder)}
    bm25, vectors = bm25_retrieval(run.store, run.special, len(run.tokenizer), run.tokenizer.unk_token_id)
    table["realm_bm25"] = {"steps": run.step, **probe.reading(run.model.encoder, index=bm25, query_vectors=vectors)}
    table["realm_gold_page"] = {"steps": run.step, **probe.reading(run.model.encoder, **probe.gold_page)}
    memoriser = out / "memoriser"

    def config_at(stop: int):
        return memoriser_config(
            memoriser, recipe=WARMUP_RECIPE, shape=run.cfg.model, tokenizer=run.tokenizer_path,
            blocks=run.blocks_path, sentences=str(files["pages"]), init_from=warmed, seed=args.seed,
            max_steps=args.max_steps, stop_at=stop, chunk=args.chunk,
        )  # fmt: skip

    curve = memorise(memoriser, config_at, probe.closed_book, warmed, chunk=args.chunk,
                     max_steps=args.max_steps, target=args.target, target_key="pages_closed_book",
                     min_seconds=table["realm"]["train_s"])  # fmt: skip
    table |= {f"memoriser@{r['step']}": r for r in curve}
    last = {key: curve[-1][key] for key in ("step", "train_s")}
    final = checkpoint_encoder(memoriser, last["step"], warmed)
    table["memorise_then_retrieve"] = {**last, **probe.reading(final)}  # its closed book: the last chunk's row
    table["memoriser_gold_page"] = {**last, **probe.reading(final, **probe.gold_page)}
    print(format_table(table, args.target, len(claims), len(rows), len(pages)))
    print(spans_in_page(run, rows, is_supported))
    write_json(args.json, {"num_claims": len(claims), "num_claim_spans": len(rows), "num_pages": len(pages), **table})
    return 0


COLUMNS = (
    ("pages_closed_book", "pages' spans, closed book"),
    ("closed_book_accuracy", "claims, closed book"),
    ("retrieved_accuracy", "claims, retrieved"),
    ("closed_book_span_accuracy_supports", "SUPPORTS spans, closed book"),
    ("retrieved_span_accuracy_supports", "SUPPORTS spans, retrieved"),
    ("evidence_page_recall_at_k", "evidence page in top-k"),
)


def format_table(table: dict, target: float, num_claims: int, num_rows: int, num_pages: int) -> str:
    return "\n".join([
        f"{num_claims} claims ({num_rows} salient spans) over {num_pages} evidence pages",
        *table_lines(table, COLUMNS),
        verdict(table, "pages_closed_book", "pages' spans", target),
    ])  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
