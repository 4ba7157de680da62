"""The embedded default world: a synthetic encyclopaedia whose facts can only be known by retrieval.

Every entity (people, cities, organisations) has a fictional name and a few facts (dates, years, other entities' names).
The knowledge corpus Z states each fact once, in an encyclopaedic article; the pre-training corpus X states the facts of
the training entities again in *different* wordings, one fact per short sentence, with the fact's character offsets so
that salient-span masking can hide it. The facts of held-out entities never appear in X: a model can only predict them
(``heldout.jsonl``) or answer questions about them (``questions.jsonl``) by retrieving their article, which is what a
REALM retriever must learn. ``heldout_articles.txt`` lists those articles, for a warm start that skips them (``realm
demo --clean-warm-start``; by default the demo's warm start reads every article,
experiments/demo/log/2026-11-25-evidence.md). Everything is drawn from ``random.Random(seed)``, so one seed always gives
byte-identical files.

Names are built from syllables and never equal a word of the templates nor one of the rule tagger's stop words, so
``realm.data.tagging.RuleTagger`` finds every fact value exactly (a unit test holds both modules to that). Changing that
stop list may therefore change the world a seed gives.
"""

from __future__ import annotations

import calendar
import json
import random
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from realm.core.atomic import write_text_atomic
from realm.core.checks import Problems
from realm.data.articles import HELDOUT_ARTICLES_FILE, write_article_list
from realm.data.sentences import split_sentences
from realm.data.tagging import CONNECTORS, STOPWORDS
from realm.data.world_templates import (
    CITY,
    FLAVOUR,
    MONTHS,
    ORG,
    ORG_KINDS,
    PERSON,
    QUESTION_TEMPLATES,
    RELATIONS,
    X_TEMPLATES,
    Z_TEMPLATES,
)

Record = dict[str, Any]
RECORD_FILES = ("corpus", "pretrain", "heldout", "entities", "questions", "z_facts")
"""The ``World`` fields ``write_world`` writes, one ``NAME.jsonl`` each."""

# A few common nouns that are not in the templates but would read badly as fictional names.
_COMMON_NOUNS = ("north", "south", "east", "west", "city", "town", "river", "house", "company", "bank", "press")


def _forbidden_words() -> set[str]:
    """Words a name must never be: every template and flavour word, and every word the rule tagger refuses to read
    as a name on its own (a city called "Given" would be an untaggable fact value)."""
    texts = [t for kinds in (Z_TEMPLATES, X_TEMPLATES) for rels in kinds.values() for ts in rels.values() for t in ts]
    texts += [t for rels in QUESTION_TEMPLATES.values() for t in rels.values()]
    texts += [w for pools in FLAVOUR.values() for pool in pools.values() for w in pool]
    words = {w for t in texts for w in re.findall(r"[a-z]+", t.lower())}
    kinds = {w.lower() for kind in ORG_KINDS for w in kind.split()}
    return words | kinds | {m.lower() for m in MONTHS} | set(_COMMON_NOUNS) | STOPWORDS | CONNECTORS


_A_BEFORE_VOWEL = re.compile(r"\b([Aa]) (?=[aeiou])")
_ONSETS = ("b", "br", "d", "dr", "f", "g", "gr", "h", "k", "kr", "l", "m", "n", "p", "r", "s", "sk", "st", "t",
           "th", "tr", "v", "vr", "z", "c", "ch", "j", "sh")  # fmt: skip
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "o", "ae", "ei", "ia", "ou")
_CODAS = ("", "", "n", "r", "l", "s", "m", "th", "sk", "rn", "nd", "rd", "x", "v", "k", "ck")
_COUNTRY_ENDINGS = ("ia", "ora", "and", "mar", "esh", "ine", "avia")


@dataclass(kw_only=True, slots=True)
class WorldConfig:
    """Size, split and wording of the generated world."""

    seed: int = 0
    """Seed of the one ``random.Random`` that draws everything; the same seed gives byte-identical files."""
    num_entities: int = 2000
    """Entities with an article: about 50% people, 25% cities, 25% organisations."""
    heldout_fraction: float = 0.2
    """Share of the entities of each kind whose facts never appear in the pre-training corpus X."""
    sentences_per_fact: int = 3
    """Differently worded X sentences per fact of a training entity (at most the X templates per relation, 4)."""
    num_countries: int = 15
    """Fictional countries: values of the cities' ``country`` facts, without articles of their own."""
    heldout_fact_seed: int = -1
    """When >= 0, every fact of the held-out entities is drawn anew from this seed, and differs from the one ``seed``
    alone gives; names, the other entities and every wording stay the same. Knowledge hot-swap: the same world with
    new facts about the held-out entities, to test that a trained REALM follows its corpus rather than its memory."""
    redraw_facts_of: str = "heldout"
    """Whose facts ``heldout_fact_seed`` redraws: ``heldout`` entities (never in X, so a model cannot have memorised
    them) or ``training`` entities (X restates them, so a model may have: the harder hot-swap test, where the corpus
    must override memory). X, the held-out sentences and the questions state the entities' new facts."""

    def __post_init__(self) -> None:
        problems = Problems()
        if self.num_entities < 8:
            problems.add(f"num_entities must be >= 8 (people, cities and organisations), got {self.num_entities}")
        if not 0.0 <= self.heldout_fraction < 1.0:
            problems.add(f"heldout_fraction must be in [0, 1), got {self.heldout_fraction}")
        max_wordings = min(len(ts) for rels in X_TEMPLATES.values() for ts in rels.values())
        if not 1 <= self.sentences_per_fact <= max_wordings:
            problems.add(f"sentences_per_fact must be in [1, {max_wordings}], got {self.sentences_per_fact}")
        if self.num_countries < 1:
            problems.add(f"num_countries must be >= 1, got {self.num_countries}")
        if self.heldout_fact_seed < -1:
            problems.add(f"heldout_fact_seed must be >= 0 (or -1: off), got {self.heldout_fact_seed}")
        if self.redraw_facts_of not in ("heldout", "training"):
            problems.add(f"redraw_facts_of must be 'heldout' or 'training', got {self.redraw_facts_of!r}")
        problems.raise_if_any()


@dataclass(slots=True)
class World:
    """The generated records, in the order they are written (see ``write_world`` for the files)."""

    config: WorldConfig
    corpus: list[Record] = field(default_factory=list)
    pretrain: list[Record] = field(default_factory=list)
    heldout: list[Record] = field(default_factory=list)
    entities: list[Record] = field(default_factory=list)
    questions: list[Record] = field(default_factory=list)
    z_facts: list[Record] = field(default_factory=list)
    """Z's own statement of every fact of every entity: the sentence of its article that holds the value, with the
    value's offsets (the X record format), so a closed-book model can be asked what it memorised of Z."""


@dataclass(slots=True)
class _Entity:
    index: int
    kind: str
    name: str
    short: str
    heldout: bool = False
    facts: dict[str, str] = field(default_factory=dict)
    flavour: dict[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"e-{self.index:06d}"


class _Names:
    """Unique pronounceable fictional words (syllables, then a final coda); never a forbidden word."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._taken = _forbidden_words()  # membership only, never iterated: set order is not deterministic

    def word(self, ending: str = "") -> str:
        rng = self._rng
        for _ in range(10_000):
            # mostly two syllables: short names keep masked spans to a few wordpieces
            num_syllables = 3 if rng.random() < 0.2 else 2
            syllables = [rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(num_syllables)]
            word = "".join(syllables) + (ending or rng.choice(_CODAS))
            if 5 <= len(word) <= 10 and word not in self._taken:
                self._taken.add(word)
                return word.capitalize()
        raise RuntimeError("ran out of fictional names; lower num_entities")


def _make_entities(cfg: WorldConfig, rng: random.Random) -> list[_Entity]:
    """Names, facts and flavour of every entity; facts pointing at other entities are drawn after all names."""
    names = _Names(rng)
    countries = [names.word(rng.choice(_COUNTRY_ENDINGS)) for _ in range(cfg.num_countries)]
    num_people, num_cities = cfg.num_entities // 2, cfg.num_entities // 4
    kinds = [PERSON] * num_people + [CITY] * num_cities + [ORG] * (cfg.num_entities - num_people - num_cities)
    rng.shuffle(kinds)  # interleave kinds so that any prefix of the corpus is a fair sample
    first_names = [names.word() for _ in range(max(20, num_people // 5))]
    entities = []
    for index, kind in enumerate(kinds):
        if kind == PERSON:
            surname = names.word()
            entity = _Entity(index=index, kind=kind, name=f"{rng.choice(first_names)} {surname}", short=surname)
        elif kind == CITY:
            city = names.word()
            entity = _Entity(index=index, kind=kind, name=city, short=city)
        else:
            org = f"{names.word()} {rng.choice(ORG_KINDS)}"
            entity = _Entity(index=index, kind=kind, name=org, short=org)
        entity.flavour = {slot: rng.choice(pool) for slot, pool in FLAVOUR[kind].items()}
        entities.append(entity)

    people, cities, orgs = ([e for e in entities if e.kind == k] for k in (PERSON, CITY, ORG))
    for city in cities:
        city.facts = {"country": rng.choice(countries), "founded": str(rng.randint(1100, 1850))}
    birth_years = {}
    for person in people:
        birth_years[person.index], born = _date(rng)
        person.facts = {"born": born, "birthplace": rng.choice(cities).name}
    founders = rng.sample(people, len(orgs)) if len(people) >= len(orgs) else [rng.choice(people) for _ in orgs]
    founded_by: dict[int, set[int]] = {}
    for org, founder in zip(orgs, founders):
        # an organisation is founded when its founder is an adult, which keeps the world plausible
        year = min(birth_years[founder.index] + rng.randint(25, 55), 2015)
        org.facts = {"founded": str(year), "headquarters": rng.choice(cities).name, "founder": founder.name}
        founded_by.setdefault(founder.index, set()).add(org.index)
    for person in people:
        # never employed by an organisation of one's own founding: an X sentence about the employer would then
        # also state the organisation's founder, a fact of the organisation
        choices = [o for o in orgs if o.index not in founded_by.get(person.index, ())] or orgs
        person.facts["employer"] = rng.choice(choices).name

    for group in (people, cities, orgs):
        for entity in rng.sample(group, round(cfg.heldout_fraction * len(group))):
            entity.heldout = True
    return entities


def _redraw_facts(entities: list[_Entity], rng: random.Random, heldout: bool) -> dict[int, dict[str, str]]:
    """New facts for every held-out (or, with ``heldout`` False, every training) entity, by index, each value
    different from the old one and of the same type (a date, a year, a city, a country, an organisation, a person),
    drawn from ``rng`` alone; the pools of values are the old world's."""
    pools = {
        "country": sorted({e.facts["country"] for e in entities if e.kind == CITY}),
        "birthplace": [e.name for e in entities if e.kind == CITY],
        "employer": [e.name for e in entities if e.kind == ORG],
        "founder": [e.name for e in entities if e.kind == PERSON],
    }
    pools["headquarters"] = pools["birthplace"]
    return {
        e.index: {relation: _new_value(e, relation, old, pools, rng) for relation, old in e.facts.items()}
        for e in entities
        if e.heldout == heldout
    }


def _new_value(entity: _Entity, relation: str, old: str, pools: dict[str, list[str]], rng: random.Random) -> str:
    if relation not in ("born", "founded"):
        others = [v for v in pools[relation] if v not in (old, entity.name)]
        return rng.choice(others) if others else old  # a world too small to offer another value
    while True:
        if relation == "born":
            value = _date(rng)[1]
        else:
            value = str(rng.randint(1100, 1850) if entity.kind == CITY else rng.randint(1825, 2015))
        if value != old:
            return value


def _date(rng: random.Random) -> tuple[int, str]:
    """A birth date: (year, "day Month year")."""
    year, month = rng.randint(1800, 1999), rng.randint(1, 12)
    return year, f"{rng.randint(1, calendar.monthrange(year, month)[1])} {MONTHS[month - 1]} {year}"


def _article(entity: _Entity, rng: random.Random) -> str:
    """3-6 sentences, about 40-70 words: every fact once, flavour sentences until a drawn length is reached."""
    templates = Z_TEMPLATES[entity.kind]
    slots = {"name": entity.name, "short": entity.short, **entity.flavour}
    sentences = [rng.choice(templates[rel]).format(v=entity.facts[rel], **slots) for rel in RELATIONS[entity.kind]]
    target = rng.randint(42, 56)
    for template in rng.sample(templates["flavour"], len(templates["flavour"])):
        if len(sentences) >= 6 or sum(len(s.split()) for s in sentences) >= target:
            break
        sentences.append(template.format(**slots))
    rng.shuffle(sentences)
    # flavour words are lowercase and names capitalised, so only "a" before a lowercase vowel needs fixing
    return _A_BEFORE_VOWEL.sub(r"\1n ", " ".join(sentences))


def _x_record(entity: _Entity, relation: str, wording: int, template: str) -> Record:
    """One X sentence, with the character offsets of its fact value."""
    value = entity.facts[relation]
    head, tail = template.split("{v}")
    head, tail = head.format(name=entity.name), tail.format(name=entity.name)
    start = len(head)
    return {
        "id": f"x-{entity.index:06d}-{relation}-{wording}", "text": head + value + tail, "entity_id": entity.id,
        "entity": entity.name, "relation": relation, "answer": value, "answer_start": start,
        "answer_end": start + len(value), "source": f"x-doc-{entity.index:06d}", "doc_id": f"z-{entity.index:06d}",
    }  # fmt: skip


def _z_fact_records(entity: _Entity, article: str, doc_id: str) -> list[Record]:
    """The sentence of ``article`` that states each fact of ``entity`` (the first that holds the value), as records
    in the X format."""
    sentences = [article[a:b] for a, b in split_sentences(article)]
    records = []
    for relation in RELATIONS[entity.kind]:
        value = entity.facts[relation]
        found = [(t, m) for t in sentences if (m := re.search(rf"(?<!\w){re.escape(value)}(?!\w)", t))]
        if not found:  # note: cannot happen for a drawn article (every fact is stated); said rather than skipped
            raise AssertionError(f"{doc_id}: the article does not state {relation}={value!r}")
        text, match = found[0]
        records.append({
            "id": f"z-{entity.index:06d}-{relation}", "text": text, "entity_id": entity.id, "entity": entity.name,
            "relation": relation, "answer": value, "answer_start": match.start(), "answer_end": match.end(),
            "heldout": entity.heldout, "doc_id": doc_id,
        })  # fmt: skip
    return records


def generate_world(cfg: WorldConfig) -> World:
    """Draws the whole world from ``cfg.seed``.

    Returns:
        ``World`` whose ``corpus`` holds one article per entity, ``pretrain`` the X sentences of training entities
        (``cfg.sentences_per_fact`` wordings per fact, shuffled), ``heldout`` one X sentence per fact of each held-out
        entity, ``entities`` every entity with its facts, ``questions`` one question per fact of every entity and
        ``z_facts`` the sentence of Z that states each fact.
    """
    rng = random.Random(cfg.seed)
    entities = _make_entities(cfg, rng)
    redraw_rng = random.Random(f"heldout-facts/{cfg.heldout_fact_seed}")
    redrawn = {}
    if cfg.heldout_fact_seed >= 0:
        redrawn = _redraw_facts(entities, redraw_rng, heldout=cfg.redraw_facts_of == "heldout")
    world = World(config=cfg)
    for e in entities:
        doc_id = f"z-{e.index:06d}"
        state = rng.getstate()
        text = _article(e, rng)
        if e.index in redrawn:
            # the new facts in the wording the old ones had; the main generator advances exactly as without them
            replay = random.Random()
            replay.setstate(state)
            e.facts = redrawn[e.index]
            text = _article(e, replay)
        world.corpus.append({"id": doc_id, "title": e.name, "text": text})
        world.z_facts.extend(_z_fact_records(e, text, doc_id))
        world.entities.append(
            {"id": e.id, "name": e.name, "kind": e.kind, "heldout": e.heldout, "facts": dict(e.facts), "doc_id": doc_id}
        )
        for relation in RELATIONS[e.kind]:
            wordings = X_TEMPLATES[e.kind][relation]
            if e.heldout:
                world.heldout.append(_x_record(e, relation, 0, rng.choice(wordings)))
            else:
                chosen = rng.sample(wordings, cfg.sentences_per_fact)
                world.pretrain.extend(_x_record(e, relation, j, t) for j, t in enumerate(chosen))
            question = QUESTION_TEMPLATES[e.kind][relation].format(name=e.name)
            world.questions.append(
                {"id": f"q-{e.index:06d}-{relation}", "question": question, "answers": [e.facts[relation]],
                 "entity_id": e.id, "relation": relation, "heldout": e.heldout}
            )  # fmt: skip
    rng.shuffle(world.pretrain)  # so that a prefix of pretrain.jsonl covers many entities
    return world


def write_world(world: World, out_dir: str | Path) -> dict[str, Path]:
    """Writes ``corpus``, ``pretrain``, ``heldout``, ``entities``, ``questions`` and ``z_facts`` ``.jsonl`` (plus the
    QA splits ``questions_train`` and ``questions_heldout``), ``heldout_articles.txt`` (the titles of the held-out
    entities' articles, which the reader warm-up and ICT skip: ``realm.data.articles``) and ``world.json``.

    Each file is written to a temporary name and renamed, so an interrupted write never leaves a truncated file.

    Returns:
        Path of every file by its name without extension (``"corpus"``, ..., ``"world"``).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name in RECORD_FILES:
        paths[name] = out_dir / f"{name}.jsonl"
        write_text_atomic(paths[name], "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in getattr(world, name)))
    # the QA splits: questions about training entities (fine-tuning) and about held-out ones (evaluation)
    for name, heldout in (("questions_train", False), ("questions_heldout", True)):
        paths[name] = out_dir / f"{name}.jsonl"
        chosen = [q for q in world.questions if q["heldout"] == heldout]
        write_text_atomic(paths[name], "".join(json.dumps(q, ensure_ascii=False) + "\n" for q in chosen))
    titles = {doc["id"]: doc["title"] for doc in world.corpus}
    paths["heldout_articles"] = write_article_list(
        out_dir / HELDOUT_ARTICLES_FILE, (titles[e["doc_id"]] for e in world.entities if e["heldout"])
    )
    kinds = [e["kind"] for e in world.entities]
    meta = {
        "config": asdict(world.config),
        "counts": {
            **{f"num_{name}": len(getattr(world, name)) for name in RECORD_FILES if name != "entities"},
            **{f"num_{kind}": kinds.count(kind) for kind in (PERSON, CITY, ORG)},
            "num_heldout_entities": sum(e["heldout"] for e in world.entities),
        },
    }
    paths["world"] = out_dir / "world.json"
    write_text_atomic(paths["world"], json.dumps(meta, indent=2) + "\n")
    return paths
