"""The embedded world: deterministic, split without leaks, X and Z worded differently, offsets exact."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from realm.data.world import World, WorldConfig, generate_world, write_world
from realm.data.world_templates import CITY, ORG, PERSON, RELATIONS, X_TEMPLATES, Z_TEMPLATES

FILES = (
    "corpus.jsonl",
    "pretrain.jsonl",
    "heldout.jsonl",
    "entities.jsonl",
    "z_facts.jsonl",
    "questions.jsonl",
    "questions_train.jsonl",
    "questions_heldout.jsonl",
    "heldout_articles.txt",
    "world.json",
)


@pytest.fixture(scope="module")
def full_world() -> World:
    return generate_world(WorldConfig())


@pytest.fixture(scope="module")
def small_world() -> World:
    return generate_world(WorldConfig(seed=7, num_entities=300))


def _contains(text: str, phrase: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(phrase)}(?!\w)", text) is not None


def test_same_seed_gives_byte_identical_files_even_across_hash_seeds(tmp_path: Path) -> None:
    write_world(generate_world(WorldConfig(seed=3, num_entities=200)), tmp_path / "a")
    # a fresh interpreter with another PYTHONHASHSEED catches any dependence on set or str-hash order
    code = (
        "import sys; from realm.data.world import *; "
        "write_world(generate_world(WorldConfig(seed=3, num_entities=200)), sys.argv[1])"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "b")], check=True, env=env, cwd=Path.cwd())
    for name in FILES:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_different_seed_gives_a_different_world() -> None:
    a = generate_world(WorldConfig(seed=1, num_entities=100))
    b = generate_world(WorldConfig(seed=2, num_entities=100))
    assert [d["text"] for d in a.corpus] != [d["text"] for d in b.corpus]
    assert {e["name"] for e in a.entities} != {e["name"] for e in b.entities}


def test_full_world_generates_and_writes_quickly(tmp_path: Path) -> None:
    start = time.perf_counter()
    paths = write_world(generate_world(WorldConfig()), tmp_path)
    assert time.perf_counter() - start < 5.0
    assert sorted(p.name for p in paths.values()) == sorted(FILES)
    # atomic writes leave no temporary files behind
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(FILES)


def test_written_files_match_the_world_and_its_counts(tmp_path: Path, small_world: World) -> None:
    paths = write_world(small_world, tmp_path)
    for name in ("corpus", "pretrain", "heldout", "entities", "questions", "z_facts"):
        lines = paths[name].read_text(encoding="utf-8").splitlines()
        assert [json.loads(line) for line in lines] == getattr(small_world, name)
    for name, heldout in (("questions_train", False), ("questions_heldout", True)):
        lines = paths[name].read_text(encoding="utf-8").splitlines()
        assert [json.loads(line) for line in lines] == [q for q in small_world.questions if q["heldout"] == heldout]
    meta = json.loads(paths["world"].read_text())
    assert meta["config"]["num_entities"] == 300 and meta["config"]["seed"] == 7
    assert meta["counts"]["num_pretrain"] == len(small_world.pretrain)
    assert meta["counts"]["num_heldout_entities"] == sum(e["heldout"] for e in small_world.entities)
    write_world(small_world, tmp_path)  # overwriting an existing world is fine


def test_the_held_out_entities_articles_are_listed_for_the_warm_start(tmp_path: Path, small_world: World) -> None:
    """``heldout_articles.txt`` names the article (its title) of every held-out entity and of no other, which the
    reader warm-up and ICT then never train on."""
    listed = write_world(small_world, tmp_path)["heldout_articles"].read_text(encoding="utf-8").splitlines()
    titles = {doc["id"]: doc["title"] for doc in small_world.corpus}
    assert sorted(listed) == sorted(titles[e["doc_id"]] for e in small_world.entities if e["heldout"])
    assert len(set(listed)) == len(listed) == sum(e["heldout"] for e in small_world.entities)


def test_kinds_split_and_record_counts(full_world: World) -> None:
    entities = full_world.entities
    by_kind = defaultdict(list)
    for entity in entities:
        by_kind[entity["kind"]].append(entity)
    assert {k: len(v) for k, v in by_kind.items()} == {PERSON: 1000, CITY: 500, ORG: 500}
    for kind, group in by_kind.items():
        assert sum(e["heldout"] for e in group) == round(0.2 * len(group)), kind
        assert all(set(e["facts"]) == set(RELATIONS[kind]) for e in group)
    train_facts = sum(len(e["facts"]) for e in entities if not e["heldout"])
    heldout_facts = sum(len(e["facts"]) for e in entities if e["heldout"])
    assert len(full_world.pretrain) == 3 * train_facts
    assert len(full_world.heldout) == heldout_facts
    assert len(full_world.questions) == train_facts + heldout_facts
    assert len(full_world.corpus) == len(entities)
    countries = {c["facts"]["country"] for c in by_kind[CITY]}
    assert 10 <= len(countries) <= 15


def test_heldout_facts_never_appear_in_pretrain(full_world: World) -> None:
    heldout = {e["id"]: e for e in full_world.entities if e["heldout"]}
    assert not any(r["entity_id"] in heldout for r in full_world.pretrain)
    assert {r["entity_id"] for r in full_world.heldout} == set(heldout)
    # a held-out entity may be another entity's fact value, but no sentence may pair its name with its own fact
    sentences_with_word = defaultdict(set)
    for i, record in enumerate(full_world.pretrain):
        for word in re.findall(r"\w+", record["text"]):
            sentences_with_word[word].add(i)
    for entity in heldout.values():
        candidates = set.intersection(*(sentences_with_word[w] for w in entity["name"].split()))
        for i in candidates:
            text = full_world.pretrain[i]["text"]
            if _contains(text, entity["name"]):
                leaked = [v for v in entity["facts"].values() if _contains(text, v)]
                assert not leaked, (text, entity)


def test_answer_offsets_are_exact_and_sentences_are_short(full_world: World) -> None:
    entities = {e["id"]: e for e in full_world.entities}
    for record in full_world.pretrain + full_world.heldout:
        text = record["text"]
        assert text[record["answer_start"] : record["answer_end"]] == record["answer"]
        entity = entities[record["entity_id"]]
        assert record["entity"] == entity["name"] and entity["name"] in text
        assert record["answer"] == entity["facts"][record["relation"]]
        assert len(text.split()) <= 20
        assert record["source"] == "x-doc-" + record["entity_id"][2:]
        assert record["doc_id"] == entity["doc_id"]


def test_each_training_fact_has_distinct_wordings(small_world: World) -> None:
    texts = defaultdict(list)
    for record in small_world.pretrain:
        texts[(record["entity_id"], record["relation"])].append(record["text"])
    assert all(len(set(t)) == 3 for t in texts.values())
    ids = [r["id"] for r in small_world.pretrain + small_world.heldout]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"x-\d{6}-[a-z]+-\d", i) for i in ids)


def test_articles_are_short_and_state_every_fact(full_world: World) -> None:
    for doc, entity in zip(full_world.corpus, full_world.entities):
        assert doc["id"] == entity["doc_id"] and re.fullmatch(r"z-\d{6}", doc["id"])
        assert doc["title"] == entity["name"]
        text = doc["text"]
        assert 40 <= len(text.split()) <= 70, text
        sentences = re.split(r"(?<=\.) ", text)
        assert 3 <= len(sentences) <= 6
        assert all(_contains(text, value) for value in entity["facts"].values())
        short = entity["name"].split()[-1] if entity["kind"] == PERSON else entity["name"]
        # every sentence names the entity, so a sentence cut out of its article still says what it is about
        assert all(short in s for s in sentences), text
        assert " a a" not in text and not re.search(r"\ba [aeiou]", text)


def test_x_and_z_wordings_are_disjoint(small_world: World) -> None:
    def phrases(template: str) -> list[str]:
        return [c.strip() for c in re.split(r"\{\w+\}", template) if len(c.split()) >= 2]

    z_templates = [t for rels in Z_TEMPLATES.values() for ts in rels.values() for t in ts]
    x_templates = [t for rels in X_TEMPLATES.values() for ts in rels.values() for t in ts]
    assert not set(z_templates) & set(x_templates)
    for x in x_templates:
        assert all(x.count(p) == 1 for p in ("{name}", "{v}")), x
        for phrase in phrases(x):
            assert not any(phrase in z for z in z_templates), phrase
    articles = "\n".join(d["text"] for d in small_world.corpus)
    for record in small_world.pretrain + small_world.heldout:
        assert record["text"] not in articles
        assert record["text"][:-1] not in articles  # not even without its full stop


def test_names_are_unique_and_never_template_words(full_world: World) -> None:
    names = [e["name"] for e in full_world.entities]
    assert len(set(names)) == len(names)
    surnames = [e["name"].split()[1] for e in full_world.entities if e["kind"] == PERSON]
    assert len(set(surnames)) == len(surnames)
    assert all(len(e["name"].split()) == 1 for e in full_world.entities if e["kind"] == CITY)
    template_words = {
        w
        for rels in (*Z_TEMPLATES.values(), *X_TEMPLATES.values())
        for ts in rels.values()
        for t in ts
        for w in re.findall(r"[a-z]+", t.lower())
    }
    first_words = {e["name"].split()[0].lower() for e in full_world.entities}
    assert not first_words & template_words
    assert not {s.lower() for s in surnames} & template_words


def test_questions_cover_every_fact_with_its_answer(small_world: World) -> None:
    entities = {e["id"]: e for e in small_world.entities}
    for q in small_world.questions:
        entity = entities[q["entity_id"]]
        assert q["answers"] == [entity["facts"][q["relation"]]]
        assert q["heldout"] == entity["heldout"]
        assert entity["name"] in q["question"] and q["question"].endswith("?")
    assert any(q["question"] == f"When was {e['name']} born?" for e in entities.values() for q in small_world.questions)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_entities": 3},
        {"heldout_fraction": 1.0},
        {"heldout_fraction": -0.1},
        {"sentences_per_fact": 0},
        {"sentences_per_fact": 5},
        {"num_countries": 0},
    ],
)
def test_bad_config_raises(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        WorldConfig(**kwargs)


def test_no_heldout_fraction_holds_out_nothing() -> None:
    world = generate_world(WorldConfig(num_entities=40, heldout_fraction=0.0, sentences_per_fact=1))
    assert world.heldout == [] and not any(e["heldout"] for e in world.entities)
    assert len(world.pretrain) == sum(len(e["facts"]) for e in world.entities)


def test_heldout_fact_seed_redraws_only_the_heldout_facts(small_world: World) -> None:
    swapped = generate_world(WorldConfig(seed=7, num_entities=300, heldout_fact_seed=1))
    assert swapped.pretrain == small_world.pretrain  # X is untouched: nothing to retrain on
    assert [e["name"] for e in swapped.entities] == [e["name"] for e in small_world.entities]
    num_changed = 0
    for old, new, old_doc, new_doc in zip(small_world.entities, swapped.entities, small_world.corpus, swapped.corpus):
        if not old["heldout"]:
            assert new["facts"] == old["facts"] and new_doc == old_doc
            continue
        for relation, value in new["facts"].items():
            assert value != old["facts"][relation], (old["name"], relation)
            assert _contains(new_doc["text"], value), (new_doc["text"], value)  # the article states the new fact
            num_changed += 1
    assert num_changed == len(small_world.heldout)
    # the held-out sentences ask for the new values, in the same wording
    for old, new in zip(small_world.heldout, swapped.heldout):
        assert old["id"] == new["id"] and new["answer"] == swapped_fact(swapped, new)


def test_redrawing_training_facts_changes_what_x_restates_and_nothing_else(small_world: World) -> None:
    swapped = generate_world(WorldConfig(seed=7, num_entities=300, heldout_fact_seed=1, redraw_facts_of="training"))
    assert swapped.heldout == small_world.heldout  # the held-out entities keep their facts
    assert [r["id"] for r in swapped.pretrain] == [r["id"] for r in small_world.pretrain]  # same sentences, same order
    for old, new, old_doc, new_doc in zip(small_world.entities, swapped.entities, small_world.corpus, swapped.corpus):
        if old["heldout"]:
            assert new["facts"] == old["facts"] and new_doc == old_doc
        else:
            assert all(new["facts"][r] != value for r, value in old["facts"].items()), old["name"]
            assert all(_contains(new_doc["text"], value) for value in new["facts"].values())
    changed = [(old, new) for old, new in zip(small_world.pretrain, swapped.pretrain) if old["answer"] != new["answer"]]
    assert len(changed) == len(small_world.pretrain)  # every X sentence now states the new fact ...
    assert all(new["answer"] == swapped_fact(swapped, new) for _, new in changed)
    for old, new in changed[:50]:  # ... in the same wording
        assert old["text"][: old["answer_start"]] == new["text"][: new["answer_start"]]
    with pytest.raises(ValueError, match="redraw_facts_of"):
        WorldConfig(redraw_facts_of="everyone")


def swapped_fact(world: World, record: dict) -> str:
    """The fact an X record states, looked up in the world's entities."""
    entity = next(e for e in world.entities if e["id"] == record["entity_id"])
    return entity["facts"][record["relation"]]


def test_z_facts_give_the_sentence_of_the_article_that_states_each_fact(full_world: World) -> None:
    """What a closed-book model memorises of Z (experiments/demo/memorisation.py): one sentence per fact, cut from the
    entity's own article, with the value's exact offsets."""
    articles = {doc["id"]: doc["text"] for doc in full_world.corpus}
    facts = {(e["id"], relation): value for e in full_world.entities for relation, value in e["facts"].items()}
    heldout = {e["id"]: e["heldout"] for e in full_world.entities}
    assert sorted((r["entity_id"], r["relation"]) for r in full_world.z_facts) == sorted(facts)
    for r in full_world.z_facts:
        assert r["text"] in articles[r["doc_id"]] and r["text"].endswith(".")
        assert r["text"][r["answer_start"] : r["answer_end"]] == r["answer"] == facts[(r["entity_id"], r["relation"])]
        assert r["heldout"] == heldout[r["entity_id"]]
