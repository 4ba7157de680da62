"""Where a finished ``realm demo`` run's retriever misses: gold-article recall@k of the held-out sentences by entity
kind and relation, and the first missed sentences with the rank of their gold article and what was retrieved.

    python bench/recall_by_relation.py runs/demo [--k 4] [--examples 8] [--json out.json]

The run's final checkpoint embeds every block with its document tower and every held-out sentence (fact masked)
with its query tower; the search is exact. Reads the world's ``heldout.jsonl`` and ``entities.jsonl``; seconds on 2
cores. It is how the issue-31 note found that the demo's misses are whole relations whose queries land on the same
few "hub" articles.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from offline import REPO  # noqa: F401,E402 isort:skip  (first: no hub, no W&B network, repository importable)
import torch  # noqa: E402
from realm.core.logging import init_logging  # noqa: E402
from realm.data.jsonl import iter_jsonl  # noqa: E402
from realm.pretrain.data import prepared_sentences  # noqa: E402
from realm.pretrain.evaluation import embed_corpus, gold_block_ids, gold_titles, heldout_batches  # noqa: E402
from realm.pretrain.saved_run import load_run  # noqa: E402


def gold_ranks(run_dir: Path) -> tuple[list[int], list[list[int]], list[str]]:
    """For each held-out sentence: the rank of its gold article's best block (0 = first), the top-10 block ids, and
    the blocks' titles (by block id)."""
    run = load_run(run_dir)
    cfg = run.cfg
    embedder, length = run.model.retriever.doc_embedder, cfg.retriever.max_block_length
    blocks = embed_corpus(embedder, run.store.blocks, run.special, length)
    rows = prepared_sentences(cfg.data.heldout, run.tokenizer, None, cfg.retriever.max_query_length, run_dir / "data")
    gold = gold_block_ids(run.store, gold_titles(cfg.data.heldout))
    ranks, tops = [], []
    with torch.no_grad():
        for batch in heldout_batches(rows, run.special, cfg.retriever.max_query_length, 64):
            order = (run.model.retriever.embed_queries(batch.query_input_ids, batch.query_attention_mask) @ blocks.T)
            order = order.argsort(dim=1, descending=True)
            for row in order:
                wanted = gold[len(ranks)]
                hits = [i for i, block in enumerate(row.tolist()) if block in wanted]
                ranks.append(hits[0] if hits else len(row))
                tops.append(row[:10].tolist())
    return ranks, tops, list(run.store.blocks["title"])


def recall_by_group(ranks: list[int], groups: list[str], k: int) -> dict[str, dict[str, float]]:
    """``{group: {"n", "recall", "missed"}}``: how many sentences of each group, the share with rank < ``k``, and
    how many missed, sorted by group."""
    total, hit = Counter(groups), Counter(g for g, r in zip(groups, ranks) if r < k)
    return {g: {"n": total[g], "recall": hit[g] / total[g], "missed": total[g] - hit[g]} for g in sorted(total)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a realm demo output folder (RUN/world, RUN/checkpoints, RUN/config.yaml)")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--examples", type=int, default=8, help="missed sentences to show")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    run = Path(args.run)
    if not (run / "world" / "entities.jsonl").is_file():
        parser.error(f"{run}: no world/entities.jsonl; give the output folder of a realm demo run")
    init_logging()
    ranks, tops, titles = gold_ranks(run)
    kinds = {record["id"]: record["kind"] for _, record in iter_jsonl(run / "world" / "entities.jsonl")}
    records = [record for _, record in iter_jsonl(run / "world" / "heldout.jsonl")][: len(ranks)]
    groups = [f"{kinds[r['entity_id']]}/{r['relation']}" for r in records]
    table = recall_by_group(ranks, groups, args.k)
    print(f"| entity kind / relation | sentences | recall@{args.k} | missed |\n|---|---|---|---|")
    for group, row in table.items():
        print(f"| {group} | {row['n']} | {row['recall']:.3f} | {row['missed']} |")
    missed = [(r, rank, top) for r, rank, top in zip(records, ranks, tops) if rank >= args.k][: args.examples]
    for record, rank, top in missed:
        print(f"- {record['text']!r} (about {record['entity']}): gold rank {rank + 1}; retrieved "
              f"{', '.join(titles[b] for b in top[: args.k])}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps({"by_relation": table, "ranks": ranks}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
