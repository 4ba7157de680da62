"""Where a finished ``realm demo`` run's retriever misses: gold-article recall@k of the held-out sentences by entity
kind and relation, and the first missed sentences with the rank of their gold article and what was retrieved.

    python -m experiments.demo.recall_by_relation runs/demo [--k 4] [--examples 8] [--hubness] [--mask-hidden]
        [--retriever runs/demo/ict/retriever] [--json out.json]

The run's final checkpoint (or ``--retriever``, e.g. the ICT retriever pre-training started from) embeds every block
with its document tower and every held-out sentence (fact masked) with its query tower; the search is exact.
``--mask-hidden`` adds the recall with the query's [MASK] wordpieces hidden from the query tower (attention 0): how
much the masked run itself pulls queries off their article (docs/recipe.md, point 5). Reads the world's
``heldout.jsonl`` and ``entities.jsonl``; seconds on 2 cores. It is how the issue-31 note found that the demo's
misses are whole relations whose queries land on the same few "hub" articles, and then the [MASK] run behind them.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from benchmarks.harness import write_json  # noqa: E402 isort:skip  (first: no hub, no W&B)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from realm.core.logging import init_logging  # noqa: E402
from realm.data.jsonl import iter_jsonl  # noqa: E402
from realm.models.retriever import Retriever  # noqa: E402
from realm.pipeline import layout  # noqa: E402
from realm.pretrain.data import prepared_sentences  # noqa: E402
from realm.pretrain.heldout_eval import embed_corpus, gold_block_ids, gold_titles, heldout_batches  # noqa: E402
from realm.pretrain.saved_run import load_run  # noqa: E402


def masks_hidden(input_ids: torch.Tensor, attention_mask: torch.Tensor, mask_id: int) -> torch.Tensor:
    """``attention_mask`` with every [MASK] position set to 0: the query as its tower would see it without the run."""
    return attention_mask.masked_fill(input_ids == mask_id, 0)


def embeddings(run_dir: Path, retriever: Path | None = None, hide_masks: bool = False
               ) -> tuple[torch.Tensor, torch.Tensor, list[set[int]], list[str], torch.Tensor | None]:  # fmt: skip
    """([Q, D] held-out query embeddings, [N, D] block embeddings, each query's gold block ids, block titles, and
    with ``hide_masks`` the [Q, D] query embeddings with their [MASK]s hidden) of the run's final checkpoint, or of
    the ``retriever`` folder over the run's blocks."""
    run = load_run(run_dir)
    cfg = run.cfg
    towers = Retriever.from_pretrained(retriever).eval() if retriever else run.model.retriever
    blocks = embed_corpus(towers.doc_embedder, run.store.blocks, run.special, cfg.retriever.max_block_length)
    rows = prepared_sentences(cfg.data.heldout, run.tokenizer, None, cfg.retriever.max_query_length, run_dir / "data")
    batches = list(heldout_batches(rows, run.special, cfg.retriever.max_query_length, 64))
    with torch.no_grad():
        queries = torch.cat([towers.embed_queries(b.query_input_ids, b.query_attention_mask) for b in batches])
        hidden = torch.cat([towers.embed_queries(b.query_input_ids, masks_hidden(b.query_input_ids,
                            b.query_attention_mask, run.special.mask)) for b in batches]) if hide_masks else None
    gold = gold_block_ids(run.store, gold_titles(cfg.data.heldout))
    return queries, blocks, gold, list(run.store.blocks["title"]), hidden


def gold_ranks(scores: torch.Tensor, gold: list[set[int]]) -> tuple[list[int], list[list[int]]]:
    """For each query (a row of ``scores`` over the blocks): the rank of its gold article's best block (0 = first)
    and the top-10 block ids."""
    ranks, tops = [], []
    for row, wanted in zip(scores.argsort(dim=1, descending=True), gold):
        hits = [i for i, block in enumerate(row.tolist()) if block in wanted]
        ranks.append(hits[0] if hits else len(row))
        tops.append(row[:10].tolist())
    return ranks, tops


def hubness_recalls(queries: torch.Tensor, blocks: torch.Tensor, gold: list[set[int]], k: int) -> dict[str, float]:
    """Recall@k of the exact search and of three hubness corrections of it: queries minus a share of their mean
    (a block near every query loses), blocks minus their mean, and CSLS (each block's score less its mean score over
    its 10 nearest queries). Embeddings are L2-normalised first (the demo's cosine score)."""
    q, b = F.normalize(queries, dim=1), F.normalize(blocks, dim=1)

    def recall(scores: torch.Tensor) -> float:
        return sum(rank < k for rank in gold_ranks(scores, gold)[0]) / len(gold)

    scores = q @ b.T
    hub = scores.topk(min(10, len(q)), dim=0).values.mean(0)
    out = {"exact": recall(scores)}
    for share in (0.25, 1.0):
        out[f"queries_centred_{share}"] = recall(F.normalize(q - share * q.mean(0), dim=1) @ b.T)
        out[f"csls_{share}"] = recall(scores - share * hub)
    out["blocks_centred"] = recall(q @ F.normalize(b - b.mean(0), dim=1).T)
    return out


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
    parser.add_argument("--hubness", action="store_true", help="also recall@k under hubness corrections")
    parser.add_argument("--mask-hidden", action="store_true", help="also recall@k with the queries' [MASK]s hidden")
    parser.add_argument("--retriever", default=None, help="a retriever folder to measure instead of the final one")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    run = Path(args.run)
    if not layout.world_file(run, "entities").is_file():
        parser.error(f"{run}: no world/entities.jsonl; give the output folder of a realm demo run")
    init_logging()
    queries, blocks, gold, titles, hidden = embeddings(run, args.retriever and Path(args.retriever), args.mask_hidden)
    ranks, tops = gold_ranks(queries @ blocks.T, gold)
    kinds = {record["id"]: record["kind"] for _, record in iter_jsonl(layout.world_file(run, "entities"))}
    records = [record for _, record in iter_jsonl(layout.world_file(run, "heldout"))][: len(ranks)]
    groups = [f"{kinds[r['entity_id']]}/{r['relation']}" for r in records]
    table = recall_by_group(ranks, groups, args.k)
    hidden_ranks = gold_ranks(hidden @ blocks.T, gold)[0] if hidden is not None else None
    hidden_table = recall_by_group(hidden_ranks, groups, args.k) if hidden_ranks is not None else None
    extra = " [MASK]s hidden |" if hidden_table else ""
    print(f"| entity kind / relation | sentences | recall@{args.k} | missed |{extra}\n|---|---|---|---|"
          + ("---|" if extra else ""))  # fmt: skip
    for group, row in table.items():
        cell = f" {hidden_table[group]['recall']:.3f} |" if hidden_table else ""
        print(f"| {group} | {row['n']} | {row['recall']:.3f} | {row['missed']} |{cell}")
    overall = {"recall": sum(r < args.k for r in ranks) / len(ranks)}
    if hidden_ranks is not None:
        overall["recall_masks_hidden"] = sum(r < args.k for r in hidden_ranks) / len(hidden_ranks)
    print(f"all {len(ranks)} sentences: " + ", ".join(f"{k} {v:.3f}" for k, v in overall.items()))
    missed = [(r, rank, top) for r, rank, top in zip(records, ranks, tops) if rank >= args.k][: args.examples]
    for record, rank, top in missed:
        print(f"- {record['text']!r} (about {record['entity']}): gold rank {rank + 1}; retrieved "
              f"{', '.join(titles[b] for b in top[: args.k])}")  # fmt: skip
    hubness = hubness_recalls(queries, blocks, gold, args.k) if args.hubness else None
    if hubness:
        print(f"recall@{args.k} under hubness corrections: " + ", ".join(f"{k} {v:.3f}" for k, v in hubness.items()))
    write_json(args.json, {"overall": overall, "by_relation": table, "by_relation_masks_hidden": hidden_table,
                           "ranks": ranks, "hubness": hubness})  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
