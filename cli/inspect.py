"""Looking into a run: ``realm evaluate-mlm RUN`` (held-out masked-fact metrics) and ``realm inspect RUN "query"``.

Both load the same things through ``load_run``: the run's resolved ``config.yaml``, its tokenizer and blocks, and the
model from the newest complete checkpoint (or ``--checkpoint``). Checkpoints are ``accelerator.save_state`` folders,
whose ``model.safetensors`` holds the ``RealmModel`` state dict without the MLM decoder weights tied to the word
embeddings (safetensors cannot store aliases); anything else missing or unexpected is an error.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

import torch

from realm.core.errors import RunError
from realm.data.packing import pack_single, pad
from realm.data.sentences import load_jsonl_dataset, prepare_sentences
from realm.index import versions
from realm.index.mips import BruteForceIndex, DocumentIndex
from realm.pretrain.config import EVAL_SEARCH_MODES
from realm.pretrain.eval_search import heldout_index
from realm.pretrain.heldout_eval import bm25_retrieval, embed_corpus, evaluate_heldout, gold_titles
from realm.pretrain.saved_run import LoadedRun, load_run
from realm.run import layout, live_index, publication

RUN_OVERRIDES_HELP = (
    "Any --section.key=value overrides the run's config.yaml, e.g. --data.blocks=PATH for inputs moved apart from "
    "the run (paths inside the run, and inputs moved with it, are found without one: realm.run.paths)."
)


def _parse_with_overrides(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """The command's own options, plus dotted overrides of the run's config (``args.overrides``)."""
    parser.epilog = RUN_OVERRIDES_HELP
    args, rest = parser.parse_known_args(argv)
    wrong = [arg for arg in rest if not (arg.startswith("--") and "." in arg.split("=", 1)[0])]
    if wrong:
        parser.error(f"unrecognized arguments: {' '.join(wrong)}")
    args.overrides = rest
    return args


# ---------------------------------------------------------------------------------------------- evaluate-mlm


def main_evaluate_mlm(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="realm evaluate-mlm",
        description="Held-out masked-fact accuracy of a run's checkpoint, with retrieval (the run's published index "
        "when it was built from the checkpoint's weights, else exact search over blocks embedded now, streamed in "
        "chunks: --search) and closed book, plus gold-article recall.",
    )
    parser.add_argument("run", help="run directory")
    parser.add_argument("--checkpoint", default=None, help="checkpoint folder (default: newest complete one)")
    parser.add_argument(
        "--heldout",
        default=None,
        help="held-out jsonl with answer_start/answer_end " "(default: data.heldout of the run)",
    )
    parser.add_argument("--max-examples", type=int, default=None, help="default: eval.max_examples of the run")
    parser.add_argument(
        "--retriever", choices=("own", "bm25"), default="own",
        help="own: the checkpoint's document tower, exact search (default); bm25: BM25 over the blocks' wordpieces, "
        "queried with the masked sentence, read by the same model (the lexical baseline)",
    )  # fmt: skip
    parser.add_argument(
        "--search", choices=EVAL_SEARCH_MODES, default=None,
        help="with --retriever own: index (the live published index, built from this checkpoint's step), exact "
        "(embed the blocks now, eval.exact_chunk_blocks at a time) or auto (index when it matches, else exact); "
        "default: eval.search of the run",
    )  # fmt: skip
    parser.add_argument("--json", default=None, metavar="OUT", help="also write the metrics to this json file")
    return _evaluate_mlm(_parse_with_overrides(parser, argv))


def _evaluate_mlm(args: argparse.Namespace) -> int:
    loaded = load_run(args.run, args.checkpoint, args.overrides)
    cfg = loaded.cfg
    heldout = args.heldout or cfg.data.heldout
    if not heldout:
        raise RunError(f"no held-out file: pass --heldout or set data.heldout in {loaded.run_dir / 'config.yaml'}")
    if not Path(heldout).is_file():
        raise RunError(f"held-out file not found: {heldout}")
    # note: no tagger is needed (the gold span is masked), so prepare_sentences' "no salient span" warning is noise
    logging.getLogger("realm.data.sentences").setLevel(logging.ERROR)
    rows = prepare_sentences(load_jsonl_dataset(heldout), loaded.tokenizer, None, cfg.retriever.max_query_length)
    if all(span[0] < 0 for span in rows["gold_span"]):
        raise RunError(
            f"{heldout}: no sentence has a gold answer span (answer_start/answer_end) within "
            f"{cfg.retriever.max_query_length - 2} wordpieces"
        )
    search = args.search or cfg.eval.search
    if args.retriever == "bm25":
        index, queries = bm25_retrieval(
            loaded.store, loaded.special, len(loaded.tokenizer), loaded.tokenizer.unk_token_id
        )
    else:
        index, queries = heldout_index(search, loaded.run_dir, loaded.step, loaded.store.blocks), None
        search = f"index {index.path.name}" if index is not None else "exact (streamed)"
    metrics = evaluate_heldout(
        loaded.model,
        rows,
        loaded.store,
        loaded.special,
        cfg.retriever,
        index=index,
        batch_size=cfg.eval.batch_size,
        max_examples=args.max_examples or cfg.eval.max_examples,
        gold_titles=gold_titles(heldout),
        query_vectors=queries,
        chunk_blocks=cfg.eval.exact_chunk_blocks,
    )
    print(
        f"run {loaded.run_dir}  checkpoint {loaded.checkpoint.name} (step {loaded.step})  held-out {heldout}  "
        f"retriever {args.retriever}" + (f"  search {search}" if args.retriever == "own" else "")
    )
    rows_out = [
        ("examples", metrics.num_examples),
        ("span accuracy, with retrieval", metrics.span_accuracy),
        ("span accuracy, closed book", metrics.closed_book_span_accuracy),
        ("token accuracy, with retrieval", metrics.token_accuracy),
        ("token accuracy, closed book", metrics.closed_book_token_accuracy),
        ("gold recall@1", metrics.gold_recall_at_1),
        (f"gold recall@{metrics.k}", metrics.gold_recall_at_k),
    ]
    print(_table(["metric", "value"], [[name, _fmt(value)] for name, value in rows_out], align="<>"))
    if args.json:
        record = {
            "run": str(loaded.run_dir),
            "checkpoint": str(loaded.checkpoint),
            "step": loaded.step,
            "heldout": heldout,
            "retriever": args.retriever,
            "search": search if args.retriever == "own" else None,
            **metrics.as_dict(prefix=""),
        }
        Path(args.json).write_text(json.dumps(record, indent=2) + "\n")
    return 0


# ---------------------------------------------------------------------------------------------- inspect


def main_inspect(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="realm inspect", description="Top-k blocks a run retrieves for a query.")
    parser.add_argument("run", help="run directory")
    parser.add_argument("query", help="query text ([MASK] allowed)")
    parser.add_argument("--k", type=int, default=5, help="blocks to show (default 5)")
    parser.add_argument("--checkpoint", default=None, help="checkpoint folder (default: newest complete one)")
    parser.add_argument(
        "--index",
        choices=("current", "exact"),
        default="current",
        help="current: the live published index (index/CURRENT); exact: embed every block now "
        "with the checkpoint's document embedder",
    )
    args = _parse_with_overrides(parser, argv)
    if args.k <= 0:
        parser.error("--k must be positive")
    return _inspect(args)


def embed_query(loaded: LoadedRun, text: str) -> torch.Tensor:
    """[1, D] embedding of ``[CLS] text [SEP]`` with the run's query embedder."""
    max_length = loaded.cfg.retriever.max_query_length
    tokens = loaded.tokenizer(text, add_special_tokens=False, truncation=True, max_length=max_length - 2)
    ids, mask = pad([pack_single(tokens["input_ids"], loaded.special, max_length)], loaded.special.pad)
    with torch.inference_mode():
        return loaded.model.retriever.embed_queries(ids, mask)


def _open_index(loaded: LoadedRun, which: str) -> tuple[DocumentIndex, str]:
    if which == "exact":
        embeddings = embed_corpus(
            loaded.model.retriever.doc_embedder,
            loaded.store.blocks,
            loaded.special,
            loaded.cfg.retriever.max_block_length,
        )
        return (
            BruteForceIndex(embeddings),
            f"exact search over {len(loaded.store)} blocks embedded at step {loaded.step}",
        )
    version = live_index.current_index_version(loaded.run_dir)
    if version is None:
        raise RunError(f"{_no_live_index(loaded.run_dir)}; use --index exact to embed the blocks now")
    published = versions.load_index_version(version)
    if published.num_vectors != len(loaded.store):
        raise RunError(f"{version} indexes {published.num_vectors} blocks but data.blocks has {len(loaded.store)}")
    return published, (
        f"index {version.name} ({published.manifest.get('factory', '?')}, built from step "
        f"{published.step} weights; query embedder from step {loaded.step})"
    )


def _no_live_index(run_dir: Path) -> str:
    """Why a run has no live index: ``index/CURRENT`` is missing (or empty), or it names something that is not a
    version folder inside the run (``current_index_version`` ignores such a pointer)."""
    pointer = layout.index_dir(run_dir) / publication.CURRENT
    name = publication.read_pointer(pointer)
    if name is None:
        state = "is empty" if pointer.exists() else "is missing"
        return f"no published index: {pointer} {state} (is the builder running?)"
    return f"no usable index: {pointer} names {name!r}, which is not a version folder inside {pointer.parent}"


def _inspect(args: argparse.Namespace) -> int:
    loaded = load_run(args.run, args.checkpoint, args.overrides)
    index, description = _open_index(loaded, args.index)
    scores, ids = index.search(embed_query(loaded, args.query), args.k)
    hits = [(s, i) for s, i in zip(scores[0].tolist(), ids[0].tolist()) if i >= 0]
    rows = loaded.store.blocks.select([i for _, i in hits]) if hits else None
    table = []
    for rank, (score, block_id) in enumerate(hits, start=1):
        title, text = rows[rank - 1]["title"], rows[rank - 1]["text"]
        table.append([str(rank), f"{score:.3f}", str(block_id), _clip(title, 32), _clip(text, 100)])
    print(f"query: {args.query}")
    print(description)
    print(_table(["rank", "score", "block", "title", "text"], table, align=">>><<"))
    return 0


# ---------------------------------------------------------------------------------------------- formatting


def _fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "\u2026"


def _table(header: list[str], rows: list[list[str]], align: str) -> str:
    """A plain aligned table: ``align`` has one ``<`` or ``>`` per column; the last column is never padded."""
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]

    def line(cells: list[str]) -> str:
        out = [
            f"{cell:{a}{w}}" if c < len(cells) - 1 or a == ">" else cell
            for c, (cell, w, a) in enumerate(zip(cells, widths, align))
        ]
        return "  ".join(out)

    return "\n".join([line(header), "  ".join("-" * w for w in widths), *(line(r) for r in rows)])
