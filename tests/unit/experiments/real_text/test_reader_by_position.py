"""``experiments/real_text/reader_by_position.py``: a span's offset is where its wordpieces first occur in the block
body."""

from __future__ import annotations

from experiments.real_text import reader_by_position


def test_the_first_occurrence_of_the_whole_span_is_its_offset():
    body = [5, 7, 9, 7, 9, 11]
    assert reader_by_position.first_offset(body, [7, 9]) == 1
    assert reader_by_position.first_offset(body, [9, 11]) == 4  # not the 9 at 2, which a 7 follows
    assert reader_by_position.first_offset(body, [11, 5]) == -1
    assert reader_by_position.first_offset(body, [5, 7, 9, 7, 9, 11]) == 0
