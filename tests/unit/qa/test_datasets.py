"""realm.qa.datasets: the open-domain QA loaders, on the real files (skipped when absent) and on small malformed ones."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import datasets
import pytest

from realm.core.errors import DataFileError
from realm.qa.datasets import (
    LoadStats,
    QAExample,
    load_curatedtrec_drqa,
    load_curatedtrec_tsv,
    load_hf_nq_open,
    load_hf_web_questions,
    load_nq_open,
    load_qa_jsonl,
    load_qa_tsv,
    load_squad,
    load_task,
    load_webquestions_brmson,
    load_webquestions_drqa,
    load_webquestions_stanford,
    parse_target_value,
)
from tests.helpers import SHARED_REAL

REAL = SHARED_REAL

NQ_DEV = REAL / "nq_open/NQ-open.dev.jsonl"
WQ_STANFORD = REAL / "webquestions/webquestions.examples.test.json"
WQ_DRQA = REAL / "webquestions/WebQuestions-test.txt"
WQ_BRMSON = REAL / "webquestions/brmson-main/test.json"
CT_DRQA = REAL / "curatedtrec/CuratedTrec-test.txt"
CT_LARGE_TSV = REAL / "curatedtrec/large2180-test.tsv"
CT_CURATED_TSV = REAL / "curatedtrec/curated-test.tsv"
SQUAD_DEV = REAL / "squad/dev-v1.1.json"

MCKINLEY = (
    r"20\s?,?\s?(32|40)0\s?-?\s?f(ee|oo)t|6,194-meter|20,?237\s*f(oo|ee)?t|20,?073\s*f(oo|ee)?t|6,?168\s*m"
    r"|6,118\s*m|6\,194 m|20\,322 feet"
)
JAMAICA = ["Jamaican Creole English Language", "Jamaican English"]


def need(path: Path) -> Path:
    if not path.is_file():
        pytest.skip(f"real data file absent: {path}")
    return path


# ---------------------------------------------------------------------------------------------------------------------
# real files: counts and first records


def test_nq_open_dev():
    stats = LoadStats()
    examples = load_nq_open(need(NQ_DEV), stats=stats)
    assert len(examples) == 3610 and stats.to_dict() == {"num_records": 3610, "num_malformed": 0}
    assert examples[0] == QAExample(
        "when was the last time anyone was on the moon",
        ["14 December 1972 UTC", "December 1972"],
        False,
        "NQ-open.dev.jsonl:1",
    )
    assert load_task("nq", str(NQ_DEV)) == examples


@pytest.mark.parametrize(
    "loader, path, first_id",
    [
        (load_webquestions_stanford, WQ_STANFORD, "webquestions.examples.test.json:2"),
        (load_webquestions_drqa, WQ_DRQA, "WebQuestions-test.txt:1"),
        (load_webquestions_brmson, WQ_BRMSON, "wqs000000"),
    ],
)
def test_webquestions_formats(loader, path, first_id):
    examples = loader(need(path))
    assert len(examples) == 2032
    assert examples[0] == QAExample("what does jamaican people speak?", JAMAICA, False, first_id)
    assert examples[1].answers == ["Lawyer"]
    assert load_task("wq", str(path)) == examples


def test_webquestions_formats_agree():
    stanford = load_webquestions_stanford(need(WQ_STANFORD))
    drqa = load_webquestions_drqa(need(WQ_DRQA))
    brmson = load_webquestions_brmson(need(WQ_BRMSON))
    assert [e.question for e in stanford] == [e.question for e in drqa] == [e.question for e in brmson]
    differ = [i for i, (s, d) in enumerate(zip(stanford, drqa)) if s.answers != d.answers]
    # The 5 targetValues with unescaped inner quotes: DrQA drops the quotes, we keep them; otherwise equal.
    assert differ == [491, 781, 941, 978, 1100]
    for i in differ:
        assert [a.replace('"', "") for a in stanford[i].answers] == drqa[i].answers
    assert stanford[941].answers == ["William Fitzgerald", 'Temperance "Tempie" Fitzgerald']
    assert stanford[978].answers[6] == '"The sayings of Poor Richard"'
    assert all(s.answers == b.answers for i, (s, b) in enumerate(zip(stanford, brmson)) if i not in differ)


def test_curatedtrec_drqa_and_tsv():
    drqa = load_curatedtrec_drqa(need(CT_DRQA))
    large = load_curatedtrec_tsv(need(CT_LARGE_TSV))
    assert len(drqa) == len(large) == 694
    assert drqa[0] == QAExample("How tall is Mount McKinley?", [MCKINLEY], True, "CuratedTrec-test.txt:1")
    assert large[0] == QAExample("How tall is Mount McKinley?", [MCKINLEY], True, "1669")
    assert [e.question for e in drqa] == [e.question for e in large]
    # One regex differs: brmson has no-break spaces where DrQA has spaces (SOURCE.md, question 2299).
    differ = [i for i, (d, t) in enumerate(zip(drqa, large)) if d.answers != t.answers]
    assert len(differ) == 1 and large[differ[0]].id == "2299"
    assert large[differ[0]].answers[0].replace("\u00a0", " ") == drqa[differ[0]].answers[0]
    assert load_task("ct", str(CT_DRQA)) == drqa and load_task("ct", str(CT_LARGE_TSV)) == large


def test_curatedtrec_curated_v2_tsv_is_a_different_430_set():
    curated = load_curatedtrec_tsv(need(CT_CURATED_TSV))
    assert len(curated) == 430 and curated[0].answers == [MCKINLEY] and curated[0].answers_are_regex


def test_squad_dev():
    stats = LoadStats()
    examples, paragraphs = load_squad(need(SQUAD_DEV), stats=stats)
    assert len(examples) == 10570 and len(paragraphs) == 2067 and stats.num_records == 10570
    assert len({p["id"] for p in paragraphs}) == 2067
    assert paragraphs[0]["id"] == "Super_Bowl_50#0" and paragraphs[0]["title"] == "Super Bowl 50"
    assert paragraphs[0]["text"].startswith("Super Bowl 50 was an American football game")
    assert examples[0] == QAExample(
        "Which NFL team represented the AFC at Super Bowl 50?",
        ["Denver Broncos"] * 3,
        False,
        "56be4db0acb8001400a502ec",
        "Super_Bowl_50#0",
    )
    by_id = {p["id"]: p["text"] for p in paragraphs}
    assert all(e.paragraph_id in by_id for e in examples)
    assert load_task("squad", str(SQUAD_DEV)) == examples


# ---------------------------------------------------------------------------------------------------------------------
# targetValue parsing


@pytest.mark.parametrize(
    "text, answers",
    [
        ("(list (description Lawyer))", ["Lawyer"]),
        ('(list (description "Jamaican English") (description Bare))', ["Jamaican English", "Bare"]),
        ('(list (description "He said \\"hi\\" (twice)"))', ['He said "hi" (twice)']),
        ('(list (description "back\\\\slash"))', ["back\\slash"]),
        ('(list (description "Temperance "Tempie" Fitzgerald"))', ['Temperance "Tempie" Fitzgerald']),
        ('(list (description ""Quoted title"") (description X))', ['"Quoted title"', "X"]),
        ('(list (description "Medley ("Song"): Theme") (description "B"))', ['Medley ("Song"): Theme', "B"]),
        ('  (list\n  (description   "a b c"  )  )  ', ["a b c"]),
    ],
)
def test_parse_target_value(text, answers):
    assert parse_target_value(text) == answers


@pytest.mark.parametrize(
    "text",
    ["(list)", "Lawyer", "(list (number 3))", '(list (description "open)', "(list (description )", "(listx)"],
)
def test_parse_target_value_rejects(text):
    with pytest.raises(ValueError):
        parse_target_value(text)


# ---------------------------------------------------------------------------------------------------------------------
# malformed input


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


GOOD = json.dumps({"question": "q?", "answer": ["a"]})


@pytest.mark.parametrize(
    "bad, reason",
    [
        ('{"question": "q?", "answer": ["a"', "invalid JSON"),
        (json.dumps({"question": "q?"}), "missing field"),
        (json.dumps({"question": "q?", "answer": []}), "empty"),
        (json.dumps({"question": "q?", "answer": [1]}), "strings"),
        (json.dumps({"question": "", "answer": ["a"]}), "question is empty"),
        ("[1, 2]", "JSON object"),
    ],
)
def test_jsonl_malformed_names_file_line_or_is_counted(tmp_path, caplog, bad, reason):
    path = write(tmp_path / "nq.jsonl", [GOOD, "", bad, GOOD])
    with pytest.raises(DataFileError, match=rf"nq\.jsonl:3: .*{reason}"):
        load_nq_open(path)
    stats = LoadStats()
    with caplog.at_level(logging.WARNING, logger="realm.qa.datasets"):
        examples = load_nq_open(path, skip_malformed=True, stats=stats)
    assert [e.id for e in examples] == ["nq.jsonl:1", "nq.jsonl:4"]
    assert stats.to_dict() == {"num_records": 2, "num_malformed": 1}
    assert "skipped 1 malformed" in caplog.text


def test_curatedtrec_invalid_regex(tmp_path):
    path = write(
        tmp_path / "ct.txt",
        [
            json.dumps({"question": "q?", "answer": ["ok|fine"]}),
            json.dumps({"question": "q2?", "answer": ["(unclosed"]}),
        ],
    )
    with pytest.raises(DataFileError, match=r"ct\.txt:2: invalid regular expression '\(unclosed'"):
        load_curatedtrec_drqa(path)
    stats = LoadStats()
    assert len(load_curatedtrec_drqa(path, skip_malformed=True, stats=stats)) == 1 and stats.num_malformed == 1
    tsv = write(tmp_path / "ct.tsv", ["1\tfactoid\tq?\tok", "2\tfactoid\tq2?\t[a-", "3\tfactoid\tonly three"])
    with pytest.raises(DataFileError, match=r"ct\.tsv:2: invalid regular expression"):
        load_curatedtrec_tsv(tsv)
    stats = LoadStats()
    examples = load_curatedtrec_tsv(tsv, skip_malformed=True, stats=stats)
    assert [e.id for e in examples] == ["1"] and stats.to_dict() == {"num_records": 1, "num_malformed": 2}


def test_json_array_errors_name_the_line(tmp_path):
    items = [
        {"url": "u", "targetValue": "(list (description A))", "utterance": "q1?"},
        {"url": "u", "utterance": "q2?"},
        {"url": "u", "targetValue": "(list (number 3))", "utterance": "q3?"},
        {"url": "u", "targetValue": '(list (description "B C"))', "utterance": "q4?"},
    ]
    path = tmp_path / "wq.json"
    path.write_text("[\n" + ",\n".join("  " + json.dumps(item) for item in items) + "\n]\n", encoding="utf-8")
    with pytest.raises(DataFileError, match=r"wq\.json:3: missing field"):
        load_webquestions_stanford(path)
    stats = LoadStats()
    examples = load_webquestions_stanford(path, skip_malformed=True, stats=stats)
    assert [(e.question, e.answers) for e in examples] == [("q1?", ["A"]), ("q4?", ["B C"])]
    assert stats.num_malformed == 2
    broken = tmp_path / "broken.json"
    broken.write_text('[\n {"qId": "a", "answers": ["x"], "qText": "q?"},\n {"qId": \n]\n', encoding="utf-8")
    with pytest.raises(DataFileError, match=r"broken\.json:4: invalid JSON"):
        load_webquestions_brmson(broken)


def test_squad_malformed(tmp_path):
    data = {
        "data": [
            {
                "title": "T",
                "paragraphs": [
                    {
                        "context": "c",
                        "qas": [
                            {"id": "1", "question": "q?", "answers": [{"text": "c", "answer_start": 0}]},
                            {"id": "2", "question": "q?", "answers": []},
                        ],
                    }
                ],
            }
        ]
    }
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(DataFileError, match=r"squad\.json: data\[0\]\.paragraphs\[0\]\.qas\[1\]"):
        load_squad(path)
    examples, paragraphs = load_squad(path, skip_malformed=True)
    assert [e.id for e in examples] == ["1"] and paragraphs == [{"id": "T#0", "title": "T", "text": "c"}]


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_nq_open(tmp_path / "nope.jsonl")


# ---------------------------------------------------------------------------------------------------------------------
# generic readers, dispatcher, hub loaders


def test_generic_jsonl_and_tsv(tmp_path):
    path = write(
        tmp_path / "qa.jsonl",
        [
            json.dumps({"q": "a?", "ans": "single", "key": 7}),
            json.dumps({"q": "b?", "ans": ["x", "y"], "key": "k"}),
        ],
    )
    examples = load_qa_jsonl(path, "q", "ans", id_field="key")
    assert [(e.question, e.answers, e.id) for e in examples] == [("a?", ["single"], "7"), ("b?", ["x", "y"], "k")]
    assert load_task("jsonl", str(path), question_field="q", answers_field="ans") == [
        QAExample("a?", ["single"], False, "qa.jsonl:1"),
        QAExample("b?", ["x", "y"], False, "qa.jsonl:2"),
    ]
    tsv = write(tmp_path / "qa.tsv", ["question\tanswers", "a?\t['x', \"y's\"]", 'b?\t["z"]', "c?\tplain [text"])
    examples = load_qa_tsv(tsv, "question", "answers")
    assert [e.answers for e in examples] == [["x", "y's"], ["z"], ["plain [text"]]
    assert examples[0].id == "qa.tsv:2"
    csv = write(tmp_path / "qa.csv", ["a?,x", "b"])
    with pytest.raises(DataFileError, match=r"qa\.csv:2: expected at least 2 columns"):
        load_qa_tsv(csv, 0, 1, sep=",")
    with pytest.raises(DataFileError, match=r"qa\.tsv:1: header"):
        load_qa_tsv(tsv, "question", "answer")


def test_load_task_rejects_unknown(tmp_path):
    with pytest.raises(ValueError):
        load_task("ct", str(tmp_path / "x.csv"))
    with pytest.raises(ValueError):
        load_task("bogus", "x")  # type: ignore[arg-type]


def test_hf_loaders(monkeypatch):
    calls = []

    def fake_load_dataset(name, split, **kw):
        calls.append((name, split))
        if name == "nq_open":
            return datasets.Dataset.from_dict({"question": ["q1?", "q2?"], "answer": [["a"], []]})
        return datasets.Dataset.from_dict({"url": ["u"], "question": ["w?"], "answers": [["b", "c"]]})

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    with pytest.raises(DataFileError, match=r"nq_open\[validation\] row 1: answer list is empty"):
        load_hf_nq_open("validation")
    stats = LoadStats()
    assert load_task("nq", "hf:validation", skip_malformed=True, stats=stats) == [
        QAExample("q1?", ["a"], False, "nq_open-validation-0")
    ]
    assert stats.num_malformed == 1
    assert load_hf_web_questions("test") == [QAExample("w?", ["b", "c"], False, "web_questions-test-0")]
    assert calls[-1] == ("web_questions", "test")
