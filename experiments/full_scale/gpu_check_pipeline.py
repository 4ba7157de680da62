"""One pipeline (``realm demo`` or ``realm real-text``) for ``experiments/full_scale/gpu_check.py``: its summary, how
long the trainer waited for the index, and the live builder's throughput against a bare forward of the same document
tower.

Runs ``realm KIND ARGS`` (everything after ``--``) into ``--out`` as a user would, then reads:

- ``summary.json``: the trainer's wait fraction, refreshes, steps, stage seconds and the quality figures;
- every published index version's manifest (``OUT/index/v-*``, the ones built during pre-training; the first, built
  before the trainer's first step, is left out unless it is the only one): blocks/s of each build (blocks over its
  ``build_seconds``: embedding, FAISS and publish, on the GPU the trainer shares), median and total;
- after the run, alone on the device: ``benchmarks/builder.py``'s ``embed_vs_bare`` on the final retriever export's
  document tower in the builder's precision, over the run's own blocks: the bare ``BertModel`` forward's blocks/s and
  ``embed_blocks``'s over the same padded batches.

``builder_over_bare`` (live builds' total blocks/s over the bare forward's) is issue 58's builder figure (goal >= 0.9)
as the demo runs it, sharing the GPU; ``embed_alone_over_bare`` is the same embedding alone, so the two apart say how
much is sharing and how much is the builder's own work per batch. Run from the repository root::

    python -m experiments.full_scale.gpu_check_pipeline --kind demo --out runs/gpu_check/demo --json demo.json -- \\
        --pretrain_config configs/pretrain/demo_gpu.yaml
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from benchmarks.harness import BenchError, run_realm, write_json  # isort:skip  (first: no hub, no W&B)
import torch
from benchmarks.builder import embed_vs_bare

from realm.core.precision import resolve_precision
from realm.index.build_version import load_build_inputs, load_doc_embedder
from realm.run import layout, publication

SUMMARY_KEYS = (
    "trainer_wait_fraction", "num_index_refreshes", "pretrain_steps", "wall_seconds", "stage_seconds",
    "heldout_accuracy_retrieval_start", "heldout_accuracy_retrieval", "heldout_accuracy_closed_book",
    "gold_recall_at_k_start", "gold_recall_at_k_end", "k", "qa_exact_match_start", "qa_exact_match_end",
    "qa_top5_accuracy_end",
)  # fmt: skip
"""The summary's figures kept (each pipeline writes the subset it has)."""


def live_builds(run: Path) -> dict:
    """Blocks/s of the index versions published in ``run`` (the first one left out when later ones exist: it is built
    before pre-training starts, with the GPU to itself)."""
    manifests = []
    for _, path in publication.list_published(layout.index_dir(run), layout.INDEX_PREFIX):
        manifest = publication.read_manifest(path)
        if manifest is not None:
            manifests.append(manifest)
    if not manifests:
        raise BenchError(f"{layout.index_dir(run)}: no published index version")
    live = manifests[1:] or manifests
    rates = [m["num_vectors"] / m["build_seconds"] for m in live if m["build_seconds"] > 0]
    return {
        "versions": len(manifests),
        "live_versions": len(live),
        "blocks": live[-1]["num_vectors"],
        "precision": live[-1].get("embed_precision"),
        "build_blocks_per_s_median": statistics.median(rates) if rates else None,
        "build_blocks_per_s_total": sum(m["num_vectors"] for m in live) / sum(m["build_seconds"] for m in live),
    }


def bare_forward(run: Path, precision: str, batch: int, blocks: int, rounds: int, device: torch.device) -> dict:
    """``embed_vs_bare`` on the final retriever export's document tower (as the builder loads it) over the first
    ``blocks`` of the run's corpus."""
    latest = layout.latest_retriever_export(run)
    if latest is None:
        raise BenchError(f"{layout.retriever_dir(run)}: no retriever export")
    _, path, export = latest
    corpus, special = load_build_inputs(export)
    resolved = resolve_precision(precision or "auto", device.type)
    embedder = load_doc_embedder(path, str(device), resolved, export["max_block_length"])
    args = argparse.Namespace(embed_blocks=blocks, block_len=export["max_block_length"], batch=batch, rounds=rounds,
                              embed_dim=embedder.projection.out_features)  # fmt: skip
    return {"precision": resolved, "batch": batch, **embed_vs_bare(embedder, corpus, special, args)}


def figures(run: Path, args: argparse.Namespace) -> dict:
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    builds = live_builds(run)
    device = torch.device(args.device)
    bare = bare_forward(run, builds["precision"], args.batch, args.bare_blocks, args.rounds, device)
    return {
        "summary": {key: summary[key] for key in SUMMARY_KEYS if key in summary},
        "trainer_wait_fraction": summary["trainer_wait_fraction"],
        "live_builds": builds,
        "bare": bare,
        "builder_over_bare": builds["build_blocks_per_s_total"] / bare["bare_blocks_per_s"],
        "embed_alone_over_bare": bare["embed_over_bare"],
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kind", required=True, choices=["demo", "real-text"])
    p.add_argument("--out", required=True, help="the run folder")
    p.add_argument("--json", required=True)
    p.add_argument("--batch", type=int, default=64, help="the builder's batch (configs/index/default.yaml)")
    p.add_argument("--bare-blocks", type=int, default=2000, help="blocks of the bare-forward comparison")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("realm_args", nargs="*", help="after --: the pipeline's own flags")
    args = p.parse_args(argv)
    run = Path(args.out).resolve()
    command = run_realm([args.kind, "--out", str(run), *args.realm_args], run.parent / f"{run.name}.log")
    result = {"command": command, **figures(run, args)}
    write_json(args.json, result)
    print(json.dumps({k: v for k, v in result.items() if k != "summary"}, indent=2, default=str))
    return result


if __name__ == "__main__":
    main()
