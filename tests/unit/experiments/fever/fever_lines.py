"""A hand-made corpus and FEVER lines whose cloze items and skips are known by construction (shared by the FEVER
cloze tests of the library and the FEVER study): see the comment on each line."""

from __future__ import annotations

import datasets

BLOCKS = datasets.Dataset.from_dict({
    "doc_id": ["ein", "ein", "ulm", "mer", "tou", "dan"],
    "title": ["Albert Einstein", "Albert Einstein", "Ulm", "Mercury (planet)", "Touchscreen", "Danube"],
    "text": [
        "Albert Einstein was a physicist born in Ulm in 1879.",
        "Einstein moved to Princeton in 1933.",
        "Ulm is a city on the Danube, where Albert Einstein was born in 1879.",
        "Mercury is the smallest planet, with a year of 88 days.",
        "A touchscreen is a screen used in Tablets since 1965.",
        "The Danube passes Ulm. Fritz Kreisler played there.",
    ],
    "uid": ["u0", "u1", "u2", "u3", "u4", "u5"],
})  # fmt: skip


def _line(id_: int, label: str, claim: str, *evidence_sets: list[str]) -> dict:
    sets = [[[9, 9, page, 0] for page in pages] for pages in evidence_sets] or [[[9, None, None, None]]]
    return {"id": id_, "verifiable": "VERIFIABLE", "label": label, "claim": claim, "evidence": sets}


S, R = "SUPPORTS", "REFUTES"
LINES = [
    _line(1, S, "Albert Einstein moved to Princeton in 1933.", ["Albert_Einstein"]),  # two spans qualify: one item
    _line(2, S, "Ulm lies on the Danube.", ["Ulm"]),  # "Ulm" is the page's title: "Danube"
    _line(3, S, "Touchscreens are used in Tablets.", ["Touchscreen"]),  # the title's plural is no item: "Tablets"
    _line(4, S, "Ulm saw a physicist born in 1879.", ["Ulm"], ["Albert_Einstein"]),  # both pages state 1879
    _line(5, R, "Einstein moved to Princeton.", ["Albert_Einstein"]),  # would qualify, but REFUTES
    _line(6, "NOT ENOUGH INFO", "Ulm has a zoo."),
    _line(7, S, "Hamlet was written by William Shakespeare.", ["Hamlet"]),  # no such page in the corpus
    _line(8, S, "the danube is long.", ["Danube"]),  # no salient span
    _line(9, S, "Albert Einstein admired Fritz Kreisler.", ["Albert_Einstein"]),  # Kreisler only in Danube's block
    _line(10, S, "The year of Mercury is 88 days, not 88 weeks.", ["Mercury_-LRB-planet-RRB-"]),  # 88 twice
]
