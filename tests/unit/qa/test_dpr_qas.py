"""DPR's qas format (``question<TAB>['answer', ...]``): the real NQ and TriviaQA splits, csv-quoted cells, and bad
rows named by ``file:line`` or counted."""

from __future__ import annotations

import pytest

from realm.core.errors import DataFileError
from realm.qa.datasets import LoadStats, QAExample, load_dpr_qas, load_task
from tests.helpers import SHARED_REAL

DPR = SHARED_REAL / "dpr_qas"


@pytest.mark.parametrize(
    "name, count, first",
    [
        ("topics.dpr.nq.dev.txt", 8757, ("who sings does he love me with reba", ["Linda Davis"])),
        ("topics.dpr.trivia.dev.txt", 8837, ("The VS-300 was a type of what?", None)),
        ("topics.dpr.trivia.test.txt", 11313, ("Who was the man behind The Chipmunks?", ["David Seville"])),
    ],
)
def test_the_real_splits_are_read_whole(name, count, first):
    path = DPR / name
    if not path.is_file():
        pytest.skip(f"real data file absent: {path}")
    stats = LoadStats()
    examples = load_task("dpr", str(path), stats=stats)
    assert len(examples) == count and stats.num_malformed == 0  # the counts of shared/data/real/dpr_qas/SOURCE.md
    assert examples[0].question == first[0] and examples[0].id == f"{name}:1"
    if first[1] is not None:
        assert examples[0].answers == first[1]
    if "trivia.test" in name:  # a csv-quoted cell: doubled quotes inside, a Python list literal after unquoting
        assert "'30s" in examples[12].answers and "1930's" in examples[12].answers


def test_a_quoted_cell_and_its_lines(tmp_path):
    path = tmp_path / "qas.txt"
    path.write_text(
        "who is it\t['A', 'B']\n"
        'what sport\t"[\'Cricket\', ""Gentleman\'s sport""]"\n'
        "\n"
        "when\t['1990']\n"
    )
    examples = load_dpr_qas(path)
    assert examples == [
        QAExample("who is it", ["A", "B"], False, "qas.txt:1"),
        QAExample("what sport", ["Cricket", "Gentleman's sport"], False, "qas.txt:2"),
        QAExample("when", ["1990"], False, "qas.txt:4"),
    ]


@pytest.mark.parametrize(
    "bad, reason",
    [
        ("q\t__import__('os')\n", "answers cell is not a list of strings"),  # never evaluated
        ("q\t[1, 2]\n", "answer"),
        ("q\n", "expected 2 tab-separated columns"),
        ("\t['a']\n", "question"),
    ],
)
def test_a_bad_row_names_its_line_or_is_counted(tmp_path, bad, reason):
    path = tmp_path / "qas.txt"
    path.write_text("ok\t['a']\n" + bad + "fine\t['b']\n")
    with pytest.raises(DataFileError, match=rf"qas.txt:2: .*{reason}"):
        load_dpr_qas(path)
    stats = LoadStats()
    assert [e.question for e in load_dpr_qas(path, skip_malformed=True, stats=stats)] == ["ok", "fine"]
    assert stats.to_dict() == {"num_records": 2, "num_malformed": 1}


def test_a_dev_file_may_have_another_format_than_the_training_file(tmp_path):
    from realm.finetune.task import TaskConfig

    (tmp_path / "train.qas").write_text("who wrote hamlet\t['William Shakespeare']\n")
    (tmp_path / "dev.jsonl").write_text('{"question": "where is rome", "answer": ["Italy"]}\n')
    task = TaskConfig(name="dpr", dev_name="nq")
    assert [q.answers for q in task.load(str(tmp_path / "train.qas"))] == [["William Shakespeare"]]
    assert [q.answers for q in task.load(str(tmp_path / "dev.jsonl"), dev=True)] == [["Italy"]]
    with pytest.raises(ValueError, match="task.dev_name must be one of"):
        TaskConfig(name="dpr", dev_name="trivia")
