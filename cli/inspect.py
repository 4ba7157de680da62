"""Looking into a run: ``realm evaluate-mlm RUN`` (held-out masked-fact metrics) and ``realm inspect RUN "query"``
(``--queries FILE``, ``--json``): the top-k blocks of a pre-training run, or of a QA run (``realm finetune``'s output,
told apart by its ``model/`` manifest) its fine-tuned reader's answer beside them (``realm.qa.inspect``).

Both load the same things through ``load_run``: the run's resolved ``config.yaml``, its tokenizer and blocks, and the
model from the newest complete checkpoint (or ``--checkpoint``). Checkpoints are ``accelerator.save_state`` folders,
whose ``model.safetensors`` holds the ``RealmModel`` state dict without the MLM decoder weights tied to the word
embeddings (safetensors cannot store aliases); anything else missing or unexpected is an error.
"""

from __future__ import annotations

import argparse
import json
import logging
from functools import partial
from pathlib import Path
from typing import Any

import torch

from realm.cli.report_stages import is_qa_run
from realm.core.argparser import ArgumentParser
from realm.core.errors import ArgumentError, MissingFileError, RunError
from realm.data.packing import pack_single, pad
from realm.data.sentences import load_jsonl_dataset, prepare_sentences
from realm.finetune.evaluate_qa import load_qa_run
from realm.index import versions
from realm.index.mips import DocumentIndex
from realm.index.streamed import StreamedIndex
from realm.pretrain.config import EVAL_SEARCH_MODES
from realm.pretrain.eval_search import embedded_chunks, heldout_index
from realm.pretrain.heldout_eval import bm25_retrieval, evaluate_heldout, gold_titles
from realm.pretrain.saved_run import LoadedRun, load_run
from realm.qa.inspect import answer_questions
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
    parser = ArgumentParser(
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
    parser = ArgumentParser(
        prog="realm inspect",
        description="Top-k blocks a run retrieves for a query: a pre-training run (config.yaml, checkpoints/) or a "
        "QA run (realm finetune's output, model/), where the fine-tuned reader's answer is printed beside its blocks.",
    )
    parser.add_argument("run", help="run directory (pre-training or QA)")
    parser.add_argument("query", nargs="?", default=None, help="query text ([MASK] allowed); or --queries")
    parser.add_argument("--queries", default=None, metavar="FILE",
                        help="a file of queries: one a line, or jsonl with a question (or text) field per line")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object a query (JSON Lines) instead of the table")
    parser.add_argument("--k", type=int, default=5, help="blocks to show (default 5)")
    parser.add_argument("--checkpoint", default=None, help="pre-training run: checkpoint folder (default: newest "
                        "complete one)")
    parser.add_argument(
        "--index",
        choices=("current", "exact"),
        default="current",
        help="pre-training run: current: the live published index (index/CURRENT); exact: embed every block now "
        "with the checkpoint's document embedder (a QA run always reads its frozen index)",
    )  # fmt: skip
    args = _parse_with_overrides(parser, argv)
    if args.k <= 0:
        parser.error("--k must be positive")
    if (args.query is None) == (args.queries is None):
        parser.error("give a query or --queries FILE (one of the two)")
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
        # note: streamed, eval.exact_chunk_blocks blocks embedded at a time, as eval.search=exact: the [N, D]
        # embeddings of a large corpus never fit in one process
        chunk = loaded.cfg.eval.exact_chunk_blocks
        chunks = partial(embedded_chunks, loaded.model.retriever.doc_embedder, loaded.store.blocks, loaded.special,
                         loaded.cfg.retriever.max_block_length, chunk)  # fmt: skip
        return (
            StreamedIndex(chunks, len(loaded.store)),
            f"exact search over {len(loaded.store)} blocks embedded at step {loaded.step}, {chunk:,} at a time",
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
    queries = [args.query] if args.queries is None else read_queries(args.queries)
    if run_kind(args.run) == "qa":
        return _inspect_qa(args, queries)
    loaded = load_run(args.run, args.checkpoint, args.overrides)
    index, description = _open_index(loaded, args.index)
    # note: every query in one search: the exact index reads the corpus once per search
    all_scores, all_ids = index.search(torch.cat([embed_query(loaded, query) for query in queries]), args.k)
    for n, (query, scores, ids) in enumerate(zip(queries, all_scores, all_ids)):
        hits = [(s, i) for s, i in zip(scores.tolist(), ids.tolist()) if i >= 0]
        titles, texts = loaded.store.texts([i for _, i in hits])
        blocks = [{"rank": rank, "score": score, "block": block, "title": title, "text": text}
                  for rank, ((score, block), title, text) in enumerate(zip(hits, titles, texts), start=1)]  # fmt: skip
        if args.json:
            print(json.dumps({"query": query, "kind": "pretrain", "blocks": blocks}, ensure_ascii=False))
            continue
        print(*([""] if n else []), f"query: {query}", *([] if n else [description]), sep="\n")
        print(_blocks_table(blocks))
    return 0


def run_kind(run_dir: str | Path) -> str:
    """``qa`` for a ``realm finetune`` output folder (``model/`` published with a reader, or a ``finetune`` config:
    ``load_qa_run`` then says the model is not published yet), else ``pretrain`` (whose loader says what such a run
    lacks); a folder that is neither is an error naming both."""
    run = Path(run_dir)
    if run.is_dir() and is_qa_run(run):
        return "qa"
    if run.is_dir() and not (run / layout.CONFIG_FILE).is_file():
        raise RunError(f"{run} has no config.yaml: it is neither a pre-training run (config.yaml, checkpoints/) nor "
                       f"a QA run (model/ published by `realm finetune`)")  # fmt: skip
    return "pretrain"


def read_queries(path: str) -> list[str]:
    """The queries of ``--queries``: one a line (blank lines skipped), or JSON Lines (a ``.jsonl`` file, or one
    whose first line is an object) with a ``question`` or ``text`` field."""
    file = Path(path)
    if not file.is_file():
        raise MissingFileError(f"--queries: no such file: {file}")
    lines = [(n, line.strip()) for n, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1)]
    lines = [(n, line) for n, line in lines if line]
    if not (file.suffix == ".jsonl" or (lines and lines[0][1].startswith("{"))):
        queries = [line for _, line in lines]
    else:
        queries = [_query_of(line, f"{file}:{n}") for n, line in lines]
    if not queries:
        raise ArgumentError(f"--queries: {file} holds no query")
    return queries


def _query_of(line: str, where: str) -> str:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise ArgumentError(f"{where}: not a JSON object ({err.msg})") from None
    query = next((record[f] for f in ("question", "text") if isinstance(record, dict) and f in record), None)
    if not isinstance(query, str) or not query.strip():
        raise ArgumentError(f"{where}: needs a non-empty string field 'question' (or 'text')")
    return query


def _inspect_qa(args: argparse.Namespace, queries: list[str]) -> int:
    """A QA run: its fine-tuned reader's answer to each query beside the blocks retrieved from its frozen index."""
    if args.checkpoint or args.index != "current" or args.overrides:
        raise ArgumentError(f"{args.run} is a QA run: --checkpoint, --index and config overrides apply to "
                            "pre-training runs (a QA run reads its published model/ and frozen index)")  # fmt: skip
    model, ctx, manifest = load_qa_run(args.run)
    answers = answer_questions(model, ctx, queries, args.k)
    for n, inspected in enumerate(answers):
        if args.json:
            print(json.dumps({"kind": "qa", **inspected.as_dict()}, ensure_ascii=False))
            continue
        source = (f"from block {inspected.answer_block} (rank {inspected.answer_rank}, span score "
                  f"{inspected.answer_score:.3f})" if inspected.answer_block >= 0 else "(no valid span)")  # fmt: skip
        description = (f"QA model of step {manifest.get('step', '?')}, frozen index {Path(manifest['index']).name}; "
                       f"the reader reads the top {ctx.reader.reader_beam} blocks")  # fmt: skip
        print(*([""] if n else []), f"query: {inspected.query}", f"answer: {inspected.answer!r} {source}",
              *([] if n else [description]), sep="\n")  # fmt: skip
        print(_blocks_table(inspected.as_dict()["blocks"], answer=True))
    return 0


# ---------------------------------------------------------------------------------------------- formatting


def _fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _blocks_table(blocks: list[dict], answer: bool = False) -> str:
    """The rows of ``--json``'s ``blocks`` as a table; ``answer`` adds a column marking the answer's block."""
    header = ["rank", "score", "block", *(["answer"] if answer else []), "title", "text"]
    table = [[str(b["rank"]), f"{b['score']:.3f}", str(b["block"]), *(["*" if b["answer"] else ""] if answer else []),
              _clip(b["title"], 32), _clip(b["text"], 100)] for b in blocks]  # fmt: skip
    return _table(header, table, align=">>>" + ("^" if answer else "") + "<<")


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
