"""``bench/reader_by_position.py``: a span's offset is where its wordpieces first occur in the block body."""

from __future__ import annotations

import importlib.util
import sys

from tests.helpers import ROOT

sys.path.insert(0, str(ROOT / "bench"))  # note: the bench imports its sibling ``harness``
_SPEC = importlib.util.spec_from_file_location("reader_by_position", ROOT / "bench" / "reader_by_position.py")
reader_by_position = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(reader_by_position)


def test_the_first_occurrence_of_the_whole_span_is_its_offset():
    body = [5, 7, 9, 7, 9, 11]
    assert reader_by_position.first_offset(body, [7, 9]) == 1
    assert reader_by_position.first_offset(body, [9, 11]) == 4  # not the 9 at 2, which a 7 follows
    assert reader_by_position.first_offset(body, [11, 5]) == -1
    assert reader_by_position.first_offset(body, [5, 7, 9, 7, 9, 11]) == 0
