"""A corpus held in one JSON object (``corpus.format: json_object``: the Wikipedia Vital summaries), read entry by
entry with ``file:line`` errors."""

from __future__ import annotations

import json

import pytest

from realm.core.errors import DataFileError
from realm.data.corpus import CorpusConfig, CorpusError, CorpusStats, read_documents, read_json_object
from tests.helpers import SHARED_REAL

VITAL = SHARED_REAL / "wikipedia_vital10k" / "summaries_en-us.json"


def _write(path, entries: dict) -> None:
    path.write_text(json.dumps(entries, indent=2))


def test_each_entry_is_a_document_whose_id_is_its_key(tmp_path):
    path = tmp_path / "c.json"
    _write(path, {"Ada": {"title": "Ada Lovelace", "extract": " Ada was a mathematician. "},
                  "Rome": {"extract": "A city."}})
    cfg = CorpusConfig(path=str(path), format="json_object", text_field="extract", title_field=None)
    docs = list(read_documents(cfg))
    assert [(d.id, d.title, d.text) for d in docs] == [
        ("Ada", "Ada", "Ada was a mathematician."), ("Rome", "Rome", "A city.")
    ]
    assert docs[1].where == f"{path}:6"  # the line where the entry starts


def test_a_bad_entry_names_its_line_or_is_counted(tmp_path):
    path = tmp_path / "c.json"
    _write(path, {"a": {"extract": "ok"}, "b": {"text": "no extract"}, "c": "not an object", "d": {"extract": "ok"}})
    with pytest.raises(CorpusError, match=rf"c.json:5: entry 'b' needs string field\(s\) \['extract'\]"):
        list(read_json_object(path, title_field=None, text_field="extract"))
    stats = CorpusStats()
    docs = list(read_json_object(path, title_field=None, text_field="extract", skip_malformed=True, stats=stats))
    assert [d.id for d in docs] == ["a", "d"] and (stats.num_records, stats.num_malformed) == (2, 2)


@pytest.mark.parametrize(
    "text, line, reason",
    [("[1, 2]", 1, "expected a JSON object"), ('{\n"a": {"extract": "x"},\n"b": {"extract": \n', 3, "not valid JSON"),
     ('{"a": {"extract": "x"}\n"b": 1}', 2, "expected ',' or '}'")],
)  # fmt: skip
def test_a_file_that_is_not_one_object_names_the_line(tmp_path, text, line, reason):
    path = tmp_path / "c.json"
    path.write_text(text)
    with pytest.raises(DataFileError, match=rf"c.json:{line}: {reason}"):
        list(read_json_object(path, title_field=None, text_field="extract"))


def test_the_vital_summaries_are_read_whole():
    if not VITAL.is_file():
        pytest.skip(f"real data file absent: {VITAL}")
    docs = list(read_documents(CorpusConfig(path=str(VITAL), format="json_object", text_field="extract")))
    assert len(docs) == 10033 and len({d.id for d in docs}) == 10033  # shared/data/real/wikipedia_vital10k/SOURCE.md
    assert docs[0].id == docs[0].title == "20th-century classical music" and docs[0].text.startswith("20th-century")
