"""The memorisation question of the seeds: can a model that memorised the documents recall their facts?

On the demo world, from the demo's shared start (world, vocabulary, blocks, reader warm-up, ICT retriever: the
``experiments/demo/evidence.py`` start), a closed-book encoder memorises the knowledge corpus Z: ``realm warmup
--task.closed_book=true`` (the null document only, REALM's closed-book slot) on X plus the sentence of Z that states
each fact (``z_facts.jsonl``, every entity's, held-out ones included), trained in chunks until its span accuracy on
the held-out entities' Z sentences (the facts it must hold) reaches ``--target`` (0.95), or ``--max-steps``. Then:

- ``memoriser@N``: the memoriser after N steps: closed book on the Z sentences it memorised and on the held-out
  paraphrases (X-style sentences of the same facts); with the ICT index, memorise-then-retrieve before any REALM step;
- ``realm``: REALM pre-training, the demo recipe, ``--realm-steps`` steps;
- ``realm_at_memoriser_compute``: REALM given the wall seconds the memoriser needed to reach the target;
- ``memoriser_at_realm_compute``: the memoriser's chunk nearest to the realm row's wall seconds;
- ``memorise_then_realm``: REALM pre-training starting from the memorised encoder instead of the warmed-up one.

Compute is wall seconds of training on this machine (the memoriser's chunks add up; evaluation is not counted), so
run it with nothing else on the cores. Every figure is whole-span accuracy of the masked fact (``evaluate_heldout``).

    python -m experiments.demo.memorisation [--out runs/memorisation] [--seed 0] [--chunk 1000] [--max-steps 16000]
        [--target 0.95] [--realm-steps 600] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.harness import REPO, write_json  # noqa: E402 isort:skip  (first: no hub, no W&B)
import torch  # noqa: E402
from experiments.common.memoriser import (  # noqa: E402
    checkpoint_encoder, memorise, memoriser_config, table_lines, verdict,
)
from experiments.demo.evidence import ict_embeddings, prepare, pretrain_row  # noqa: E402

from realm.core.config import load_config  # noqa: E402
from realm.core.logging import init_logging  # noqa: E402
from realm.data.block_store import BlockStore  # noqa: E402
from realm.data.blocks import load_blocks  # noqa: E402
from realm.data.packing import SpecialIds  # noqa: E402
from realm.data.vocab import load_tokenizer  # noqa: E402
from realm.index.mips import BruteForceIndex  # noqa: E402
from realm.models.encoder import KnowledgeAugmentedEncoder  # noqa: E402
from realm.models.retriever import Retriever  # noqa: E402
from realm.pretrain.config import PretrainConfig  # noqa: E402
from realm.pretrain.data import prepared_sentences  # noqa: E402
from realm.pretrain.heldout_eval import evaluate_heldout, gold_titles  # noqa: E402
from realm.pretrain.model import RealmModel  # noqa: E402
from realm.run.publication import replace_published  # noqa: E402
from realm.warmstart.warmup import WarmupConfig  # noqa: E402

PRETRAIN_CONFIG = REPO / "configs/pretrain/demo.yaml"
WARMUP_CONFIG = REPO / "configs/warmup/demo.yaml"


def memorisation_data(paths: dict[str, Path], out: Path) -> dict[str, Path]:
    """``train``: X then every Z fact sentence (what the memoriser reads); ``z_heldout``: the Z sentences of the
    held-out entities' facts (what it must reproduce); ``paraphrases``: the held-out sentences (the same facts in
    X's wordings, never seen)."""
    z_facts = [json.loads(line) for line in Path(paths["z_facts"]).read_text().splitlines()]
    out.mkdir(parents=True, exist_ok=True)
    files = {"train": out / "x_plus_z_facts.jsonl", "z_heldout": out / "z_heldout.jsonl"}
    files["train"].write_text(
        Path(paths["pretrain"]).read_text() + "".join(json.dumps(r) + "\n" for r in z_facts)
    )
    files["z_heldout"].write_text("".join(json.dumps(r) + "\n" for r in z_facts if r["heldout"]))
    return {**files, "paraphrases": Path(paths["heldout"])}


class Probe:
    """Evaluates an encoder on the Z sentences and the paraphrases, closed book and over the ICT index."""

    def __init__(self, paths: dict[str, Path], data: dict[str, Path], cache: Path) -> None:
        self.cfg = load_config(PretrainConfig, PRETRAIN_CONFIG)
        self.tokenizer = load_tokenizer(paths["tokenizer"])
        self.special = SpecialIds.of(self.tokenizer)
        self.store = BlockStore(load_blocks(paths["blocks"]))
        self.retriever = Retriever.from_pretrained(paths["retriever"])
        self.index = BruteForceIndex(ict_embeddings(paths, []))
        length = self.cfg.retriever.max_query_length
        self.sets = {
            name: (prepared_sentences(str(data[name]), self.tokenizer, None, length, cache), gold_titles(data[name]))
            for name in ("z_heldout", "paraphrases")
        }

    def __call__(self, encoder: KnowledgeAugmentedEncoder) -> dict[str, float]:
        model = RealmModel(self.retriever, encoder)
        figures = {}
        for name, (rows, titles) in self.sets.items():
            result = evaluate_heldout(
                model, rows, self.store, self.special, self.cfg.retriever, index=self.index,
                batch_size=self.cfg.eval.batch_size, gold_titles=titles,
            )  # fmt: skip
            figures[f"{name}_closed_book"] = result.closed_book_span_accuracy
            figures[f"{name}_over_ict_index"] = result.span_accuracy
        return figures


def publish_encoder(encoder: KnowledgeAugmentedEncoder, tokenizer, out: Path) -> Path:
    """The memorised encoder as a published folder that ``train.init_encoder`` reads."""

    def save(folder: Path) -> None:
        encoder.save_pretrained(folder)
        tokenizer.save_pretrained(str(folder))

    return replace_published(out, save, {"kind": "memorised_encoder"})


def realm_row(args, name: str, paths: dict[str, Path], steps: int, ict: torch.Tensor, probe: Probe) -> dict:
    """A REALM pre-training row from the shared start (``paths``), with the probe's figures of its final encoder."""
    figures, trainer, _ = pretrain_row(Path(args.out) / "rows" / name, paths, steps, [], ict)
    return {"steps": steps, **figures, **probe(trainer.unwrapped.encoder)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/memorisation")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--entities", type=int, default=2000)
    parser.add_argument("--chunk", type=int, default=1000, help="memoriser steps between evaluations")
    parser.add_argument("--max-steps", type=int, default=16000, help="the memoriser's budget (its schedule's length)")
    parser.add_argument("--target", type=float, default=0.95, help="span accuracy on the memorised Z sentences")
    parser.add_argument("--realm-steps", type=int, default=600)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.chunk < 1 or args.max_steps < args.chunk:
        parser.error("--chunk must be >= 1 and --max-steps >= --chunk")
    init_logging()
    out = Path(args.out)
    paths = prepare(out, args.seed, args.entities)
    data = memorisation_data(paths, out / "data")
    probe = Probe(paths, data, out / "cache")
    ict = ict_embeddings(paths, [])
    table = {"start": {"steps": 0, **probe(KnowledgeAugmentedEncoder.from_pretrained(str(paths["encoder"])))}}
    run, shape = out / "memoriser", load_config(PretrainConfig, PRETRAIN_CONFIG).model

    def config_at(stop: int) -> WarmupConfig:
        return memoriser_config(
            run, recipe=WARMUP_CONFIG, shape=shape, tokenizer=str(paths["tokenizer"]), blocks=str(paths["blocks"]),
            sentences=str(data["train"]), init_from=str(paths["encoder"]), seed=args.seed, max_steps=args.max_steps,
            stop_at=stop, chunk=args.chunk,
        )  # fmt: skip

    curve = memorise(run, config_at, probe, paths["encoder"], chunk=args.chunk, max_steps=args.max_steps,
                     target=args.target, target_key="z_heldout_closed_book")  # fmt: skip
    table |= {f"memoriser@{r['step']}": r for r in curve}
    reached = curve[-1]
    table["realm"] = realm_row(args, "realm", paths, args.realm_steps, ict, probe)
    realm_s_per_step = table["realm"]["wall_s"] / args.realm_steps
    equal = max(1, round(reached["train_s"] / realm_s_per_step))
    table["realm_at_memoriser_compute"] = realm_row(args, "realm_at_memoriser_compute", paths, equal, ict, probe)
    nearest = min(curve, key=lambda r: abs(r["train_s"] - table["realm"]["wall_s"]))
    table["memoriser_at_realm_compute"] = nearest
    memorised = publish_encoder(
        checkpoint_encoder(out / "memoriser", reached["step"], paths["encoder"]), probe.tokenizer, out / "memorised"
    )
    table["memorise_then_realm"] = realm_row(
        args, "memorise_then_realm", {**paths, "encoder": memorised}, args.realm_steps, ict, probe
    )
    print(format_table(table, args.target))
    write_json(args.json, table)
    return 0


COLUMNS = (
    ("z_heldout_closed_book", "Z sentences, closed book"),
    ("paraphrases_closed_book", "paraphrases, closed book"),
    ("paraphrases_over_ict_index", "paraphrases, ICT index"),
    ("span_accuracy", "paraphrases, own index"),
)


def format_table(table: dict, target: float) -> str:
    return "\n".join([*table_lines(table, COLUMNS), verdict(table, "z_heldout_closed_book", "Z sentences", target)])


if __name__ == "__main__":
    sys.exit(main())
