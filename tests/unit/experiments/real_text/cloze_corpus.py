"""A hand-made corpus of a few articles whose reachable cloze items and question subsets are known by construction
(shared by the reachable-cloze and question-cloze tests)."""

from __future__ import annotations

import re

import datasets

BLOCKS = datasets.Dataset.from_dict({
    "doc_id": ["ein", "ein", "ulm", "mer", "sol", "dan", "phy"],
    "title": ["Albert Einstein", "Albert Einstein", "Ulm", "Mercury (planet)", "Solar System", "Danube", "Physics"],
    "text": [
        "Albert Einstein was a physicist born in Ulm in 1879. He wrote on relativity.",
        "Einstein moved to Princeton in 1933. He stayed there until his death.",
        "Ulm is a city on the Danube. Ulm is the birthplace of Albert Einstein, born in 1879.",
        "Mercury is the smallest planet, with a year of 88 days.",
        "The innermost planet mercury has a year of 88 days. The physicist Albert Einstein came to Princeton in 1933. "
        "In 1933 Albert Einstein left Europe, and 1933 was his last year there.",
        "The Danube passes the city of Ulm, founded in 850. Albert Einstein admired Fritz Kreisler in 1920.",
        "Albert Einstein is the famous physicist of our history. The Ulmer Zeitung printed it in 1879.",
    ],
    "uid": ["u0", "u1", "u2", "u3", "u4", "u5", "u6"],
})
"""Items by construction (the tagger tags years, "88 days", "Fritz Kreisler" and "Albert Einstein"):

- strict: "Ulm is the birthplace of Albert Einstein, born in 1879." names Albert Einstein exactly and 1879 is in his
  lead; "Albert Einstein was a physicist born in Ulm in 1879." names Ulm, whose lead states both of its spans.
- loose (any block): "... Albert Einstein came to Princeton in 1933." 1933 is only in Einstein's second block.
- loose (bare name, lower case): "The innermost planet mercury has a year of 88 days." names Mercury (planet).
- not items: "The Danube passes the city of Ulm, founded in 850." (850 only in its own article); "Albert Einstein
  admired Fritz Kreisler in 1920." (the title named, the spans in no block of his); "Albert Einstein is the famous
  physicist of our history." (the only span is the title itself); "The Ulmer Zeitung printed it in 1879." (Ulmer is no
  word-boundary mention of Ulm); "Mercury is the smallest planet, ..." (names only its own article); "In 1933 Albert
  Einstein left Europe, and 1933 was ..." (1933 recurs in the sentence: the query itself gives it away).
"""

ITEMS = {
    "Ulm is the birthplace of Albert Einstein, born in 1879.": ({"1879"}, "Albert Einstein", "strict"),
    "Albert Einstein was a physicist born in Ulm in 1879.": ({"1879", "Albert Einstein"}, "Ulm", "strict"),
    "The physicist Albert Einstein came to Princeton in 1933.": ({"1933"}, "Albert Einstein", "loose"),
    "The innermost planet mercury has a year of 88 days.": ({"88 days"}, "Mercury (planet)", "loose"),
}
"""sentence -> (the spans it may mask, its gold article, its tier)."""


class FakeTagger:
    """Tags years, "88 days" and two names: a stand-in for spaCy (whose load is slow)."""

    PATTERN = re.compile(r"\b1\d{3}\b|\b850\b|88 days|Fritz Kreisler|Albert Einstein")

    def tag(self, texts):
        return [[(m.start(), m.end(), "NAME") for m in self.PATTERN.finditer(t)] for t in texts]
