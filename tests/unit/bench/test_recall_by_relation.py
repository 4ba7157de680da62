"""``bench/recall_by_relation.py``: recall@k per group of held-out sentences."""

from __future__ import annotations

import importlib.util
import sys

from tests.helpers import ROOT

sys.path.insert(0, str(ROOT / "bench"))  # note: the bench imports its sibling ``offline`` first, as a script does
_SPEC = importlib.util.spec_from_file_location("recall_by_relation", ROOT / "bench" / "recall_by_relation.py")
recall_by_relation = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(recall_by_relation)


def test_recall_counts_each_group_on_its_own():
    ranks = [0, 3, 4, 120, 1, 0]
    groups = ["city/country", "city/country", "city/country", "person/born", "person/born", "org/founder"]
    assert recall_by_relation.recall_by_group(ranks, groups, k=4) == {
        "city/country": {"n": 3, "recall": 2 / 3, "missed": 1},
        "org/founder": {"n": 1, "recall": 1.0, "missed": 0},
        "person/born": {"n": 2, "recall": 0.5, "missed": 1},
    }
