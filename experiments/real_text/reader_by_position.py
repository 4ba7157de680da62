"""The reader warm-up's span accuracy by where the masked span sits in its own block: does the reader copy from every
position of a block, or only from the first wordpieces (where the copy curriculum's short blocks trained it)?

Reads a warm-up encoder (``realm warmup`` / the real-text pipeline's ``OUT/warmup/encoder``) on the sentences of the
first ``--blocks`` blocks, each with one salient span masked and read against its own block (the warm-up's trivial
retrieval), and counts whole-span accuracy in buckets of the span's first wordpiece offset in the block body
(the first occurrence of the span's wordpieces there; a span not found is counted apart).

    python -m experiments.real_text.reader_by_position --run runs/real_text [--encoder RUN/warmup/encoder] [--blocks 400]
        [--bucket 32] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.harness import BenchError, write_json  # noqa: E402 isort:skip  (first: no hub, no W&B network)
import torch  # noqa: E402
from realm.core.config import load_config  # noqa: E402
from realm.core.logging import init_logging  # noqa: E402
from realm.data.block_store import BlockStore  # noqa: E402
from realm.data.blocks import load_blocks  # noqa: E402
from realm.data.packing import SpecialIds  # noqa: E402
from realm.data.tagging import build_tagger  # noqa: E402
from realm.data.vocab import load_tokenizer  # noqa: E402
from realm.models.encoder import KnowledgeAugmentedEncoder  # noqa: E402
from realm.pretrain.config import PretrainConfig  # noqa: E402
from realm.pretrain.reader_warmup import TrivialRetrievalCollator, prepare_block_sentences  # noqa: E402


def first_offset(body: list[int], span: list[int]) -> int:
    """Where ``span`` first occurs in ``body`` (-1 if nowhere)."""
    for start in range(len(body) - len(span) + 1):
        if body[start : start + len(span)] == span:
            return start
    return -1


@torch.inference_mode()
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="a real-text pipeline output folder (config.yaml, blocks)")
    parser.add_argument("--encoder", default=None, help="default: RUN/warmup/encoder")
    parser.add_argument("--blocks", type=int, default=400)
    parser.add_argument("--bucket", type=int, default=32, help="wordpieces per position bucket")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    init_logging()
    run = Path(args.run)
    cfg = load_config(PretrainConfig, run / "config.yaml")
    tokenizer = load_tokenizer(cfg.data.tokenizer)
    special = SpecialIds.of(tokenizer)
    blocks = load_blocks(cfg.data.blocks)
    store = BlockStore(blocks)
    encoder = KnowledgeAugmentedEncoder.from_pretrained(args.encoder or str(run / "warmup/encoder")).eval()
    rows = prepare_block_sentences(blocks.select(range(args.blocks)), tokenizer, build_tagger(cfg.data.tagging),
                                   cfg.retriever.max_query_length)  # fmt: skip
    rows = rows.filter(lambda r: len(r["salient_spans"]) > 0)
    collate = TrivialRetrievalCollator(special, store, cfg.retriever.max_query_length,
                                       cfg.retriever.max_block_length, "salient", seed=0)  # fmt: skip
    counts: dict[str, list[int]] = {}
    for start in range(0, len(rows), 32):
        examples = [{**rows[i], "idx": i, "epoch": 0} for i in range(start, min(start + 32, len(rows)))]
        batch = collate(examples)
        if batch.size != len(examples):  # note: outcomes are matched to examples by position below
            raise BenchError(f"the collator kept {batch.size} of {len(examples)} sentences, all with salient spans")
        pred = encoder(batch.input_ids, batch.attention_mask, batch.token_type_ids, batch.mask_positions).argmax(-1)
        mask = batch.target_mask.bool()
        right = ((pred == batch.target_ids) | ~mask).all(dim=1).tolist()
        _, bodies = store.tokens([ex["block_id"] for ex in examples])
        for ok, body, target, m in zip(right, bodies, batch.target_ids.tolist(), mask.tolist()):
            offset = first_offset(list(body), [t for t, keep in zip(target, m) if keep])
            key = "not in block" if offset < 0 else f"{offset // args.bucket * args.bucket:>3}-"
            counts.setdefault(key, [0, 0])
            counts[key][0] += int(ok)
            counts[key][1] += 1
    print("| span's offset in its block | spans | span accuracy |\n|---|---|---|")
    for key in sorted(counts):
        right, total = counts[key]
        print(f"| {key} | {total} | {right / total:.3f} |")
    write_json(args.json, {k: {"spans": t, "span_accuracy": r / t} for k, (r, t) in counts.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
