"""Evidence that REALM learns what it claims: one table, one run, on the demo world (CPU).

Every row starts from the same world, reader warm-up and ICT retriever (the demo's stages and configs) and
pre-trains for the same steps and batch; then the held-out facts (facts of entities that never occur in the
pre-training corpus X, stated only in their article in the knowledge corpus Z) are asked with the fact masked.

| row | what changes | the paper's counterpart |
|---|---|---|
| ``realm`` | nothing: the demo recipe, an index refresh every ``--refresh`` steps | REALM |
| ``closed_book`` | the null document only (``train.loss=closed_book``) | a BERT without retrieval |
| ``stale_30x`` | an index refresh every 30 x ``--refresh`` steps | Table 2, "30x stale MIPS" |
| ``frozen`` | the ICT index is never refreshed (the trainer exports no new retriever) | no refresh at all |
| ``random_span``, ``random_token`` | the masking (``data.masking``) | Table 2, masking ablation |
| ``hot_swap`` | the ``realm`` row's model, no retraining, over a corpus whose held-out facts were drawn anew | |
|  | (same names); only the index is rebuilt | REALM's modularity claim |
| ``hot_swap_training`` | the same with the *training* entities' facts drawn anew, asked with X's sentences: facts | |
|  | the model trained on, so the corpus must override what it may have memorised | |
| ``bm25_reader`` | the ``realm`` row's model reading BM25's top-k instead of its own retriever's | a BM25 baseline |
| ``majority`` | no model: each relation's most frequent answer in X | a prior-only baseline |

Whether a model that memorised Z could do without retrieval is ``experiments/demo/memorisation.py``'s question (a
closed-book encoder trained on Z until it reproduces Z's facts, then asked their paraphrases).

A ``start`` line gives the same figures for the shared starting model (warmed-up reader, ICT retriever, ICT index)
before any pre-training step. ``--ict-steps`` shortens ICT: on the demo world 40 steps already give gold recall@4
0.64-0.77, but a retriever that young moves further in pre-training, which is when a never-refreshed index costs
(experiments/demo/log/2026-11-25-evidence.md, "Index freshness"); at a retriever rate as high as the encoder's, give it
its own warm-up too (``--set optim.retriever_warmup_steps=200``), or it can lose its candidates when the rate peaks.

Each row reports held-out whole-span accuracy with retrieval, closed book (null document only), gold-article
recall@k (exact search with the row's final document embedder) and wall seconds (pre-training + evaluation). The
``hot_swap`` row also reports the share of its predictions that still give the *old* fact (memory, not the corpus).
Two more columns say how much an index's staleness can cost at all: the span accuracy of the row's final model
searching the ICT index (the frozen row's index) instead of a fresh one, and the mean cosine between each block's
ICT embedding and its final one (how far the document tower moved; at 1.0 no index can be stale). And one says what
the row trained on: the share of training queries whose masked answer was in a retrieved candidate
(``train/answer_recall``), as a mean over the whole run and over its last fifth of steps.

Run from the repository root: ``python -m experiments.demo.evidence [--steps 300] [--refresh 5] [--ict-steps N]
[--rows realm,closed_book] [--json out.json]``; ``--entities``, ``--steps`` and ``--refresh`` scale it. A 30x staler
index differs from a frozen one only while 30 x ``--refresh`` < ``--steps``. On 2 CPU cores the builder, rebuilding
every few steps, takes about one core from the trainer (the defaults took about 30 minutes there).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

from benchmarks.harness import REPO, write_json  # noqa: E402 isort:skip  (first: no hub, no W&B)
import torch  # noqa: E402

from realm.core.config import load_config  # noqa: E402
from realm.core.logging import init_logging, read_metrics  # noqa: E402
from realm.data.block_store import BlockStore  # noqa: E402
from realm.data.blocks import build_blocks_from_config, load_blocks  # noqa: E402
from realm.data.corpus import CorpusConfig  # noqa: E402
from realm.data.jsonl import iter_jsonl  # noqa: E402
from realm.data.packing import SpecialIds  # noqa: E402
from realm.data.vocab import load_tokenizer  # noqa: E402
from realm.data.world import WorldConfig, generate_world, write_world  # noqa: E402
from realm.index.mips import BruteForceIndex  # noqa: E402
from realm.models.retriever import Retriever  # noqa: E402
from realm.pipeline.demo import DemoConfig, make_data, pretrain_base, warm_start_demo  # noqa: E402
from realm.pipeline.warm_start import WarmStartConfig  # noqa: E402
from realm.pretrain.config import PretrainConfig  # noqa: E402
from realm.pretrain.data import prepared_sentences  # noqa: E402
from realm.pretrain.heldout_eval import bm25_retrieval, embed_corpus, evaluate_heldout, gold_titles  # noqa: E402
from realm.run.layout import METRICS_FILE  # noqa: E402
from realm.trainer.pretrain_loop import Trainer  # noqa: E402

OPTIONAL_COLUMNS = ("old_fact_share", "ict_index_span_accuracy", "doc_cosine_ict_final")
TRAIN_RECALL = "train/answer_recall"
ROWS = ("majority", "realm", "closed_book", "stale_30x", "frozen", "random_span", "random_token",
        "bm25_reader", "hot_swap", "hot_swap_training")
USES_REALM = ("bm25_reader", "hot_swap", "hot_swap_training")
"""Rows that reuse the realm row's trained model instead of training their own."""
NEVER = 10**9
ROW_CONFIG = REPO / "configs/pretrain/demo.yaml"  # every row's pre-training config, before its overrides


def prepare(out: Path, seed: int, entities: int, ict_steps: int | None = None) -> dict[str, Path]:
    """The demo's world, vocabulary, blocks, reader warm-up and ICT retriever (``ict_steps``: the demo's ICT steps
    unless given), shared by every row."""
    demo = DemoConfig(out=str(out), seed=seed, num_entities=entities, warm_start=WarmStartConfig(ict_steps=ict_steps),
                      pretrain_config=str(ROW_CONFIG))  # fmt: skip
    pretrain = pretrain_base(demo)
    paths = make_data(demo, pretrain)
    warm = warm_start_demo(demo, paths, pretrain.model)  # the demo shape
    return {**paths, "encoder": warm.encoder, "retriever": warm.retriever}


def ict_embeddings(paths: dict[str, Path], overrides: list[str]) -> torch.Tensor:
    """[N, D] embeddings of every block by the shared ICT retriever's document tower: the ICT index, made once for
    every row's staleness columns (``overrides``: those common to every row)."""
    length = load_config(PretrainConfig, ROW_CONFIG, overrides).retriever.max_block_length
    embedder = Retriever.from_pretrained(paths["retriever"]).doc_embedder
    special = SpecialIds.of(load_tokenizer(paths["tokenizer"]))
    return embed_corpus(embedder, load_blocks(paths["blocks"]), special, length)


def pretrain_row(
    out: Path, paths: dict[str, Path], steps: int, overrides: list[str], ict: torch.Tensor, start: bool = False
) -> tuple[dict, Trainer, dict | None]:
    """Pre-trains one row from the shared start and evaluates it, over a fresh index and over the ICT one (``ict``,
    from ``ict_embeddings``); returns (row figures, the trainer, the figures of the shared starting model when
    ``start``: warmed-up reader, ICT retriever, before any pre-training step)."""
    cfg = load_config(
        PretrainConfig,
        ROW_CONFIG,
        [
            f"--train.run_dir={out}", f"--train.max_steps={steps}", f"--train.save_interval={steps}",
            f"--train.init_retriever={paths['retriever']}", f"--train.init_encoder={paths['encoder']}",
            f"--data.tokenizer={paths['tokenizer']}", f"--data.blocks={paths['blocks']}",
            f"--data.sentences={paths['pretrain']}", f"--data.heldout={paths['heldout']}", *overrides,
        ],
    )  # fmt: skip
    trainer = Trainer(cfg)
    model, store, special = trainer.unwrapped, trainer.store, trainer.special

    def evaluate(embeddings: torch.Tensor):
        return evaluate_heldout(
            model, trainer.heldout, store, special, cfg.retriever, index=BruteForceIndex(embeddings),
            batch_size=cfg.eval.batch_size, max_examples=cfg.eval.max_examples, gold_titles=trainer.heldout_titles,
        )  # fmt: skip

    start_figures = None
    if start:
        t_start = time.perf_counter()
        start_figures = _figures(evaluate(ict)) | {"wall_s": time.perf_counter() - t_start}
    t0 = time.perf_counter()
    try:
        trainer.run()
    finally:
        trainer.close()

    final = embed_corpus(model.retriever.doc_embedder, store.blocks, special, cfg.retriever.max_block_length)
    figures = _figures(evaluate(final))
    wall = time.perf_counter() - t0  # note: the row's own cost; the staleness diagnostics below are not part of it
    drift = torch.nn.functional.cosine_similarity(ict, final, dim=1).mean().item()
    extra = {"ict_index_span_accuracy": evaluate(ict).span_accuracy, "doc_cosine_ict_final": drift}
    return figures | extra | training_recall(out / METRICS_FILE, steps) | {"wall_s": wall}, trainer, start_figures


def training_recall(metrics_path: Path, steps: int) -> dict:
    """The mean of ``train/answer_recall`` over a row's logged windows, over all of them and over those in its last
    fifth of steps (empty when the row logged none: a closed-book row still retrieves, so it has them too)."""
    records = [(r["step"], r[TRAIN_RECALL]) for r in read_metrics(metrics_path) if TRAIN_RECALL in r]
    if not records:
        return {}
    end = [value for step, value in records if step > 0.8 * steps] or [records[-1][1]]
    mean = sum(value for _, value in records) / len(records)
    return {"train_answer_recall": mean, "train_answer_recall_end": sum(end) / len(end)}


def _figures(metrics) -> dict:
    return {
        "span_accuracy": metrics.span_accuracy,
        "closed_book_span_accuracy": metrics.closed_book_span_accuracy,
        f"gold_recall@{metrics.k}": metrics.gold_recall_at_k,
        "num_examples": metrics.num_examples,
    }


def majority_row(paths: dict[str, Path]) -> dict:
    """The answer most often given for each relation in the pre-training sentences X, guessed for every held-out
    sentence of that relation: what knowing the relation alone is worth (no model, no retrieval)."""
    t0 = time.perf_counter()
    counts: dict[str, Counter] = {}
    for _, record in iter_jsonl(paths["pretrain"]):
        counts.setdefault(record["relation"], Counter())[record["answer"]] += 1
    guess = {relation: c.most_common(1)[0][0] for relation, c in counts.items()}
    limit = load_config(PretrainConfig, ROW_CONFIG).eval.max_examples  # the other rows' held-out sentences
    heldout = [record for _, record in iter_jsonl(paths["heldout"])][:limit]
    right = sum(guess.get(r["relation"]) == r["answer"] for r in heldout)
    return {"span_accuracy": right / len(heldout), "num_examples": len(heldout), "wall_s": time.perf_counter() - t0}


def bm25_row(trainer: Trainer) -> dict:
    """The realm row's trained model reading BM25's top-k (over the blocks' wordpieces, queried with the masked
    held-out sentence) instead of its own retriever's: how much of the row's figure a lexical retriever gives."""
    t0 = time.perf_counter()
    cfg, store, special = trainer.cfg, trainer.store, trainer.special
    bm25, queries = bm25_retrieval(store, special, len(trainer.tokenizer), trainer.tokenizer.unk_token_id)
    metrics = evaluate_heldout(
        trainer.unwrapped, trainer.heldout, store, special, cfg.retriever, index=bm25, query_vectors=queries,
        batch_size=cfg.eval.batch_size, max_examples=cfg.eval.max_examples, gold_titles=trainer.heldout_titles,
    )  # fmt: skip
    return _figures(metrics) | {"wall_s": time.perf_counter() - t0}


def hot_swap_row(out: Path, seed: int, entities: int, trainer: Trainer, redraw: str = "heldout") -> dict:
    """The trained ``realm`` model over a corpus whose facts of ``redraw`` entities were drawn anew (same names and
    wordings); only the blocks are rebuilt (embedded by the trained document tower). ``heldout``: the held-out
    sentences are asked. ``training``: the first ``eval.max_examples`` pre-training sentences are asked, facts the
    model trained on and may have memorised; ``old_corpus_accuracy`` is how well it gives them over the old corpus.
    ``old_fact_share``: how often it still gives the old fact over the new corpus (memory, not the corpus)."""
    t0 = time.perf_counter()
    world = WorldConfig(seed=seed, num_entities=entities, heldout_fact_seed=1, redraw_facts_of=redraw)
    paths = write_world(generate_world(world), out)
    cfg = trainer.cfg
    corpus = CorpusConfig(path=str(paths["corpus"]), max_block_length=cfg.retriever.max_block_length)
    store = BlockStore(load_blocks(build_blocks_from_config(corpus, trainer.tokenizer, out / "blocks")))
    cache = out / "data"

    def evaluate(sentences: Path, blocks: BlockStore = store):
        rows = prepared_sentences(str(sentences), trainer.tokenizer, None, cfg.retriever.max_query_length, cache)
        # note: no index argument: the blocks are embedded with the trained document embedder (a rebuild)
        return evaluate_heldout(
            trainer.unwrapped, rows, blocks, trainer.special, cfg.retriever, batch_size=cfg.eval.batch_size,
            max_examples=cfg.eval.max_examples, gold_titles=gold_titles(str(sentences)),
        )  # fmt: skip

    if redraw == "heldout":
        new_asked, old_asked, extra = paths["heldout"], Path(cfg.data.heldout), {}
    else:
        new_asked = first_lines(paths["pretrain"], cfg.eval.max_examples, out / "asked_new.jsonl")
        old_asked = first_lines(Path(cfg.data.sentences), cfg.eval.max_examples, out / "asked_old.jsonl")
        extra = {"old_corpus_accuracy": evaluate(old_asked, trainer.store).span_accuracy}
    new = evaluate(new_asked)
    old = evaluate(old_asked)  # the old facts asked over the new corpus: what memory still gives
    return _figures(new) | extra | {"old_fact_share": old.span_accuracy, "wall_s": time.perf_counter() - t0}


def first_lines(path: Path, count: int, out: Path) -> Path:
    """The first ``count`` records of a jsonl file, written to ``out`` (the pre-training sentences asked by the
    training hot swap: the same ids, in the same order, in the old and the new world)."""
    with path.open() as lines:
        out.write_text("".join(line for _, line in zip(range(count), lines)))
    return out


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str], list[str]]:
    """(the options, the rows to run in order, the dotted overrides ``--set`` gives every row), checked before any
    minute is spent."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/evidence")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--entities", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=300, help="pre-training steps of every row")
    parser.add_argument(
        "--ict-steps", type=int, default=None,
        help="ICT steps of the shared retriever (default: the demo's); few make a retriever that pre-training must "
        "improve, so that an index's freshness can matter",
    )  # fmt: skip
    parser.add_argument("--refresh", type=int, default=5, help="refresh interval of the realm row (stale: 30x)")
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated subset of {','.join(ROWS)}")
    parser.add_argument("--json", default=None, help="also write the table here")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="a config override for every row, e.g. --set optim.retriever_lr_scale=1.0 (repeatable)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    requested = set(args.rows.split(","))
    if unknown := requested - set(ROWS):
        parser.error(f"unknown rows {sorted(unknown)}; choose from {ROWS}")
    rows = [name for name in ROWS if name in requested]  # bm25_reader and hot_swap after realm: they reuse its model
    if (reusing := [name for name in USES_REALM if name in rows]) and "realm" not in rows:
        parser.error(f"{', '.join(reusing)} reuse(s) the realm row's model: list realm too")
    if args.ict_steps is not None and args.ict_steps < 1:
        parser.error(f"--ict-steps must be at least 1 (ICT trains the shared retriever), got {args.ict_steps}")
    if bad := [item for item in args.set if "=" not in item]:
        parser.error(f"--set takes KEY=VALUE, got {bad}")
    common = [f"--{item}" for item in args.set]
    try:  # note: an unknown key or bad value is reported now, not after the shared start's minutes
        load_config(PretrainConfig, ROW_CONFIG, common)
    except ValueError as err:  # note: realm's ConfigError and every config's own __post_init__ check
        parser.error(f"--set: {err}")
    return args, rows, common


def row_overrides(refresh: int, common: list[str]) -> dict[str, list[str]]:
    """Each pre-trained row's overrides over ``common``: its refresh interval (``refresh``, 30x it, never), loss or
    masking."""
    lag = load_config(PretrainConfig, ROW_CONFIG, common).refresh.swap_lag

    def every(interval: int) -> list[str]:
        """Exports every ``interval`` steps, each going live ``min(lag, interval - 1)`` steps later (reproducible;
        ``--set refresh.swap_lag=-1`` swaps each as soon as it is built, the fastest)."""
        return [f"--refresh.refresh_interval={interval}", f"--refresh.swap_lag={min(lag, interval - 1)}"]

    fresh = every(refresh)
    return {
        "realm": fresh,
        "closed_book": [*fresh, "--train.loss=closed_book"],
        "stale_30x": [*every(30 * refresh), f"--refresh.max_staleness={NEVER}"],
        "frozen": [*every(NEVER), f"--refresh.max_staleness={NEVER}"],
        "random_span": [*fresh, "--data.masking=random_span"],
        "random_token": [*fresh, "--data.masking=random_token"],
    }


def main(argv: list[str] | None = None) -> int:
    args, rows, common = parse_args(argv)
    init_logging()
    out = Path(args.out)
    t0 = time.perf_counter()
    paths = prepare(out, args.seed, args.entities, args.ict_steps)
    table = {"prepare": {"wall_s": time.perf_counter() - t0}}
    variants = row_overrides(args.refresh, common)
    ict = ict_embeddings(paths, common)
    realm_trainer = None
    for name in rows:
        if name in ("hot_swap", "hot_swap_training"):
            redraw = "heldout" if name == "hot_swap" else "training"
            table[name] = hot_swap_row(out / name, args.seed, args.entities, realm_trainer, redraw)
        elif name == "bm25_reader":
            table[name] = bm25_row(realm_trainer)
        elif name == "majority":
            table[name] = majority_row(paths)
        else:
            first = "start" not in table
            figures, trainer, start = pretrain_row(
                out / "rows" / name, paths, args.steps, [*common, *variants[name]], ict, start=first
            )
            if first:  # note: the starting model is every row's; its figures are measured once, in the first row
                table["start"] = start
                print(json.dumps({"start": start}), flush=True)
            table[name] = figures
            realm_trainer = trainer if name == "realm" else realm_trainer
        print(json.dumps({name: table[name]}), flush=True)
    print(format_table(table))
    write_json(args.json, table)
    return 0


def ratios(table: dict) -> list[str]:
    """The realm row's held-out accuracy over each baseline that has a figure: the trained closed-book row, the realm
    model's own null slot, and the majority guess (a ratio over 0 is left out)."""
    if "realm" not in table:
        return []
    realm = table["realm"]["span_accuracy"]
    baselines = {
        "the closed_book row (trained without retrieval)": table.get("closed_book", {}).get("span_accuracy"),
        "the realm model's own null slot": table["realm"]["closed_book_span_accuracy"],
        "the majority guess per relation": table.get("majority", {}).get("span_accuracy"),
    }
    return [
        f"realm / {name}: {realm:.3f} / {value:.3f} = {realm / value:.1f}x"
        for name, value in baselines.items()
        if value
    ]


def format_table(table: dict) -> str:
    lines = [
        "| row | held-out span acc | closed book | gold recall@k | old facts | acc over ICT index | doc cos ICT-final "
        "| train answer recall (run / end) | wall s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in table.items():
        if name == "prepare":
            continue
        recall = next((v for k, v in row.items() if k.startswith("gold_recall@")), float("nan"))
        closed = row.get("closed_book_span_accuracy", float("nan"))
        old, ict, cos = (f"{row[k]:.3f}" if k in row else "" for k in OPTIONAL_COLUMNS)
        trained = ""
        if "train_answer_recall" in row:
            trained = f"{row['train_answer_recall']:.3f} / {row['train_answer_recall_end']:.3f}"
        lines.append(
            f"| {name} | {row['span_accuracy']:.3f} | {closed:.3f} | {recall:.3f} | {old} "
            f"| {ict} | {cos} | {trained} | {row['wall_s']:.0f} |"
        )
    lines.append(f"(shared start: world, reader warm-up and ICT in {table['prepare']['wall_s']:.0f} s)")
    lines += ratios(table)
    if swap := table.get("hot_swap_training"):
        lines.append(
            f"hot_swap_training: X's facts given over the old corpus {swap['old_corpus_accuracy']:.3f}; over the new "
            f"one, the new fact {swap['span_accuracy']:.3f}, the old (memorised) fact {swap['old_fact_share']:.3f}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
