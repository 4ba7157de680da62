"""The baselines and hot swaps of ``experiments/demo/evidence.py`` for a finished ``realm demo`` run, from its final
checkpoint.

    python -m experiments.demo.evidence_of_run runs/demo [--json out.json]

Rows (each ``experiments/demo/evidence.py``'s function of the same name, on the run's own world and model; no training):
``majority`` (each relation's most frequent answer in X), ``bm25_reader`` (the run's model reading BM25's top-k),
``hot_swap`` (held-out entities' facts redrawn in the corpus, only the blocks re-embedded) and ``hot_swap_training``
(the same for the training entities' facts, asked with X's own sentences: facts the model trained on). Takes a few
minutes on 2 cores, mostly re-embedding the redrawn corpora.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace

from benchmarks.harness import write_json  # noqa: E402 isort:skip  (first: no hub, no W&B)
from experiments.demo import evidence  # noqa: E402

from realm.core.logging import init_logging  # noqa: E402
from realm.pipeline import layout  # noqa: E402
from realm.pretrain.data import prepared_sentences  # noqa: E402
from realm.pretrain.heldout_eval import gold_titles  # noqa: E402
from realm.pretrain.saved_run import load_run  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a realm demo output folder (RUN/world, RUN/checkpoints, RUN/config.yaml)")
    parser.add_argument("--json", default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    init_logging()
    run = Path(args.run)
    if not (layout.world_dir(run) / "world.json").is_file():
        parser.error(f"{run}: no world/world.json; give the output folder of a realm demo run")
    world = json.loads((layout.world_dir(run) / "world.json").read_text())["config"]
    loaded = load_run(run)
    cfg = loaded.cfg
    heldout = prepared_sentences(cfg.data.heldout, loaded.tokenizer, None, cfg.retriever.max_query_length, run / "data")
    # note: the attributes of a Trainer that the rows read
    trainer = SimpleNamespace(
        cfg=cfg, tokenizer=loaded.tokenizer, unwrapped=loaded.model, special=loaded.special, store=loaded.store,
        heldout=heldout, heldout_titles=gold_titles(cfg.data.heldout),
    )  # fmt: skip
    paths = {name: layout.world_file(run, name) for name in ("pretrain", "heldout")}
    table = {"majority": evidence.majority_row(paths), "bm25_reader": evidence.bm25_row(trainer)}
    for name, redraw in (("hot_swap", "heldout"), ("hot_swap_training", "training")):
        out = run / "evidence" / name
        table[name] = evidence.hot_swap_row(out, world["seed"], world["num_entities"], trainer, redraw)
    print(json.dumps(table, indent=1))
    write_json(args.json, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
