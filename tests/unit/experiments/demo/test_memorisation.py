"""``experiments/demo/memorisation.py``: what the memoriser reads and is asked, and the table's verdict line."""

from __future__ import annotations

import json

from experiments.demo import memorisation
from realm.data.world import WorldConfig, generate_world, write_world


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_memoriser_reads_x_and_every_z_fact_and_is_asked_the_heldout_ones(tmp_path):
    paths = write_world(generate_world(WorldConfig(seed=1, num_entities=60)), tmp_path / "world")
    data = memorisation.memorisation_data(paths, tmp_path / "data")
    x, z = _records(paths["pretrain"]), _records(paths["z_facts"])
    assert _records(data["train"]) == x + z
    asked = _records(data["z_heldout"])
    assert asked == [r for r in z if r["heldout"]] and asked
    # the paraphrases are the same held-out facts in X's wordings, which the memoriser never reads
    assert {(r["entity_id"], r["relation"]) for r in _records(data["paraphrases"])} == {
        (r["entity_id"], r["relation"]) for r in asked
    }
    assert not {r["text"] for r in _records(data["paraphrases"])} & {r["text"] for r in x + z}


def test_the_table_says_when_the_target_was_reached_and_when_not():
    row = {"paraphrases_closed_book": 0.1, "paraphrases_over_ict_index": 0.2}
    reached = {
        "memoriser@100": {"step": 100, "train_s": 5.0, "z_heldout_closed_book": 0.5, **row},
        "memoriser@200": {"step": 200, "train_s": 10.0, "z_heldout_closed_book": 0.96, **row},
    }
    assert "0.95 reached at step 200 (10 s)" in memorisation.format_table(reached, 0.95)
    missed = {"memoriser@100": reached["memoriser@100"]}
    assert "0.95 not reached (0.500 at the last chunk)" in memorisation.format_table(missed, 0.95)
