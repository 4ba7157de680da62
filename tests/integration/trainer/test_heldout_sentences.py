"""A sentence-level held-out set (``data.heldout_sentences``, the reachable held-out cloze's sentences) is never in
the trainer's X: the listed sentences are dropped from what it trains on, and ``realm tag --config`` fills the very
cache the trainer then reads."""

import json

import pytest
from accelerate import Accelerator
from accelerate.state import AcceleratorState

from realm.cli.main import main
from realm.core.config import load_config
from realm.data import tag_stage
from realm.pretrain.config import PretrainConfig
from realm.trainer.pretrain_loop import Trainer
from tests.helpers import data_overrides

TINY = "configs/pretrain/tiny.yaml"


def test_the_trainer_never_trains_on_the_held_out_sentences(tiny_world, tmp_path, monkeypatch):
    texts = [json.loads(line)["text"] for line in open(tiny_world["pretrain"])]
    held = texts[:5]
    listed = tmp_path / "heldout_sentences.txt"
    listed.write_text("".join(f"{t}\n" for t in held))
    run = tmp_path / "run"
    overrides = [f"--train.run_dir={run}", f"--data.heldout_sentences={listed}", "--refresh.spawn_builder=false",
                 *[o for o in data_overrides(tiny_world) if not o.startswith("--data.heldout=")]]  # fmt: skip
    assert main(["tag", "--config", TINY, *overrides]) == 0  # the cache, X less the listed sentences
    monkeypatch.setattr(tag_stage.ShardTagger, "__call__", lambda self, shard: pytest.fail("the trainer re-tagged X"))
    AcceleratorState._reset_state(reset_partial_state=True)
    trainer = Trainer(load_config(PretrainConfig, TINY, overrides), Accelerator(cpu=True))
    try:
        kept = trainer.sentences["text"]
    finally:
        trainer.close()
        AcceleratorState._reset_state(reset_partial_state=True)
    assert len(kept) == len(texts) - len(set(held)) and not set(held) & set(kept)
