"""Data-preparation commands of the ``realm`` CLI: ``world``, ``vocab``, ``blocks`` and ``tag``.

    realm world  --out DIR [--seed N] [--entities N] [--heldout-fraction F] [--heldout-fact-seed N]
                 [--redraw-facts-of heldout|training]
    realm vocab  --input FILE.jsonl [--input ...] [--field text] --out DIR [--vocab-size N] [--cased]
    realm blocks --out DIR --tokenizer TOK (--config corpus.yaml | --input PATH [--format ...] ...)
    realm tag    (--config pretrain.yaml [--section.key=value ...] | --sentences F --tokenizer TOK --cache-dir D)
                 [--workers N] [--shard-size N]

Each ``main_<command>(argv)`` parses its own options and returns an exit code; a malformed input is reported as
``realm <command>: error: FILE:LINE: reason`` with exit code 2, never as a traceback.
"""

from __future__ import annotations

import argparse
import json

from realm.core.argparser import ArgumentParser
from realm.core.config import from_dict, load_config
from realm.core.errors import ConfigError, DataFileError
from realm.data.jsonl import iter_field

# ---------------------------------------------------------------------------------------------- realm world


def main_world(argv: list[str]) -> int:
    """``realm world``: writes the synthetic encyclopaedia (corpus, pretrain, heldout, entities, questions)."""
    from realm.data.world import WorldConfig, generate_world, write_world

    parser = ArgumentParser(prog="realm world", description="Write the embedded synthetic world as jsonl.")
    parser.add_argument("--out", required=True, help="output folder (created if needed)")
    parser.add_argument("--seed", type=int, default=0, help="one seed always gives byte-identical files")
    parser.add_argument("--entities", type=int, default=2000, help="entities with an article (>= 8)")
    parser.add_argument(
        "--heldout-fraction",
        type=float,
        default=0.2,
        help="share of entities whose facts never appear in the pre-training sentences",
    )
    parser.add_argument(
        "--heldout-fact-seed",
        type=int,
        default=-1,
        help="draw the held-out entities' facts anew from this seed (same names and wording; knowledge hot-swap)",
    )
    parser.add_argument(
        "--redraw-facts-of",
        choices=("heldout", "training"),
        default="heldout",
        help="whose facts --heldout-fact-seed redraws: held-out entities (default) or training ones, which X restates",
    )
    args = parser.parse_args(argv)
    cfg = from_dict(
        WorldConfig,
        {
            "seed": args.seed,
            "num_entities": args.entities,
            "heldout_fraction": args.heldout_fraction,
            "heldout_fact_seed": args.heldout_fact_seed,
            "redraw_facts_of": args.redraw_facts_of,
        },
        where="realm world",
    )
    world = generate_world(cfg)
    paths = write_world(world, args.out)
    counts = {
        "corpus": len(world.corpus),
        "pretrain": len(world.pretrain),
        "heldout": len(world.heldout),
        "entities": len(world.entities),
        "questions": len(world.questions),
    }
    width = max(len(name) for name in paths)
    for name, path in paths.items():
        count = f"{counts[name]:>7} records" if name in counts else ""
        print(f"{name:<{width}}  {count:>15}  {path}")
    return 0


# ---------------------------------------------------------------------------------------------- realm vocab


def main_vocab(argv: list[str]) -> int:
    """``realm vocab``: trains a BERT WordPiece vocabulary on one text field of jsonl files."""
    from realm.data.vocab import SPECIAL_TOKENS, train_wordpiece

    parser = ArgumentParser(prog="realm vocab", description="Train a WordPiece vocabulary on jsonl text.")
    parser.add_argument(
        "--input",
        action="append",
        required=True,
        metavar="FILE.jsonl",
        help="jsonl file with one object per line (repeat for several files)",
    )
    parser.add_argument("--field", default="text", help="field holding the text (default: text)")
    parser.add_argument("--out", required=True, help="tokenizer folder (AutoTokenizer.from_pretrained reloads it)")
    parser.add_argument("--vocab-size", type=int, default=8000, help="entries, special tokens included")
    parser.add_argument("--cased", action="store_true", help="keep case and accents (default: uncased, as BERT)")
    parser.add_argument("--min-frequency", type=int, default=2, help="minimum pair count for a merge")
    args = parser.parse_args(argv)
    if args.vocab_size <= len(SPECIAL_TOKENS):
        parser.error(f"--vocab-size must exceed the {len(SPECIAL_TOKENS)} special tokens")
    # note: every line is validated before training, so a bad line fails in seconds rather than after a long
    # training pass, and its file:line is reported rather than swallowed by the Rust trainer.
    num_texts = sum(1 for _ in iter_field(args.input, args.field))
    if num_texts == 0:
        raise DataFileError(f"no text found in {', '.join(args.input)}")
    tokenizer = train_wordpiece(
        iter_field(args.input, args.field),
        args.vocab_size,
        args.out,
        lowercase=not args.cased,
        min_frequency=args.min_frequency,
    )
    print(
        f"trained {len(tokenizer)} wordpieces ({'cased' if args.cased else 'uncased'}) on {num_texts} texts "
        f"-> {args.out}"
    )
    return 0


# ---------------------------------------------------------------------------------------------- realm blocks


def main_blocks(argv: list[str]) -> int:
    """``realm blocks``: reads a corpus (jsonl, a JSON object, DPR tsv, HF dataset), cuts it into blocks and saves
    them."""
    import typing

    from realm.data.blocks import build_blocks_from_config
    from realm.data.corpus import CorpusConfig, CorpusFormat
    from realm.data.vocab import load_tokenizer

    parser = ArgumentParser(
        prog="realm blocks",
        description="Cut a knowledge corpus into [CLS] title [SEP] body [SEP] blocks (a saved Arrow dataset).",
    )
    parser.add_argument("--out", required=True, help="blocks folder (replaced if it exists)")
    parser.add_argument("--tokenizer", required=True, help="tokenizer folder (e.g. from `realm vocab`) or hub name")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", help="YAML file of a realm.data.corpus.CorpusConfig")
    source.add_argument("--input", help="jsonl/tsv file, saved dataset folder, or hub dataset name")
    parser.add_argument("--format", choices=typing.get_args(CorpusFormat), default=None)
    parser.add_argument("--title-field", default=None, help="title field; 'null' takes the text's first line")
    parser.add_argument("--text-field", default=None)
    parser.add_argument("--max-block-length", type=int, default=None, help="wordpieces with specials (288)")
    parser.add_argument("--max-title-length", type=int, default=None, help="title wordpieces kept (32)")
    parser.add_argument("--skip-malformed", action="store_true", help="count and skip bad records instead of failing")
    args = parser.parse_args(argv)

    overrides: dict = {}
    if args.input is not None:
        overrides["path"] = args.input
    for key in ("format", "text_field", "max_block_length", "max_title_length"):
        if getattr(args, key) is not None:
            overrides[key] = getattr(args, key)
    if args.title_field is not None:
        overrides["title_field"] = None if args.title_field in ("null", "none", "") else args.title_field
    if args.skip_malformed:
        overrides["skip_malformed"] = True
    cfg = load_config(CorpusConfig, args.config, overrides)
    if not cfg.path:
        raise ConfigError(f"{args.config}: path is not set")
    tokenizer = load_tokenizer(args.tokenizer)
    out = build_blocks_from_config(cfg, tokenizer, args.out)
    stats = json.loads((out / "corpus_stats.json").read_text())
    print(f"{stats['num_blocks']} blocks from {stats['num_documents']} documents -> {out}")
    print(f"skipped: {stats['num_empty']} empty documents, {stats['num_malformed']} malformed records")
    return 0


# ---------------------------------------------------------------------------------------------- realm tag


def main_tag(argv: list[str]) -> int:
    """``realm tag``: tokenises and tags the pre-training sentences X into the cache a trainer reads
    (``realm.data.tag_stage``), over worker processes, resuming from the shards a killed run published."""
    from pathlib import Path

    from realm.core.config import options_help
    from realm.core.extras import check_extras
    from realm.data.tag_stage import TagStageConfig
    from realm.data.tagging import TaggingConfig
    from realm.pretrain.config import PretrainConfig
    from realm.pretrain.data import sentence_tag_job, tag_sentences

    parser = ArgumentParser(
        prog="realm tag", allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Tag the pre-training sentences of a config (--config C [--section.key=value ...]) or of a file "
        "(--sentences F --tokenizer T --cache-dir D) into the sharded cache the trainer reads, so that no rank waits.",
        epilog=options_help(PretrainConfig),
    )  # fmt: skip
    parser.add_argument("--config", help="pre-training YAML: its data.sentences, data.tokenizer, data.tagging, ...")
    parser.add_argument("--sentences", help="jsonl of sentences (without --config)")
    parser.add_argument("--tokenizer", help="tokenizer folder or hub name (without --config)")
    parser.add_argument("--cache-dir", help="cache folder (without --config; with it: data.cache_dir or RUN/data)")
    parser.add_argument("--kind", choices=("rule", "spacy"), default="rule", help="tagger (without --config)")
    parser.add_argument("--max-query-length", type=int, default=64, help="query wordpieces with specials (64)")
    parser.add_argument("--exclude", default="", help="file of sentences never to prepare, one a line")
    parser.add_argument("--workers", type=int, default=None, help="worker processes (data.tag_stage.num_workers)")
    parser.add_argument("--shard-size", type=int, default=None, help="lines per shard (data.tag_stage.shard_size)")
    args, overrides = parser.parse_known_args(argv)
    if args.config is None:
        if overrides or not (args.sentences and args.tokenizer and args.cache_dir):
            parser.error("give --config C [--section.key=value ...], or --sentences, --tokenizer and --cache-dir")
        from realm.data.vocab import load_tokenizer

        tokenizer, tagging, stage = load_tokenizer(args.tokenizer), TaggingConfig(kind=args.kind), TagStageConfig()
        sentences, cache, length = args.sentences, Path(args.cache_dir), args.max_query_length
    else:
        from realm.models.pretrained import load_model_tokenizer

        cfg = load_config(PretrainConfig, args.config, overrides)
        if not cfg.data.sentences:
            raise ConfigError(f"{args.config}: data.sentences is not set")
        check_extras(cfg)
        tokenizer = load_model_tokenizer(cfg.data.tokenizer, cfg.model.init_from)
        sentences, tagging, stage = cfg.data.sentences, cfg.data.tagging, cfg.data.tag_stage
        args.exclude = args.exclude or cfg.data.heldout_sentences  # note: the trainer's cache key includes it
        cache = Path(args.cache_dir or cfg.data.cache_dir or Path(cfg.train.run_dir) / "data")
        length = cfg.retriever.max_query_length
    given = {"num_workers": stage.num_workers if args.workers is None else args.workers,
             "shard_size": stage.shard_size if args.shard_size is None else args.shard_size}  # fmt: skip
    stage = from_dict(TagStageConfig, given, where="realm tag")
    job = sentence_tag_job(sentences, tokenizer, tagging, length, cache, args.exclude)
    rows = tag_sentences(job, stage)
    print(f"{len(rows)} sentences tagged ({tagging.kind}) -> {job.target}")
    return 0
