"""``realm inspect`` on a QA run (``realm finetune``'s output): the fine-tuned reader's answer beside the blocks it
retrieved, as a table or JSON Lines, for one query or a file of them; the answers are ``evaluate_qa``'s."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from realm.cli.main import main
from realm.finetune.evaluate_qa import load_qa_run
from realm.finetune.train import Finetuner
from realm.qa.datasets import QAExample
from realm.qa.qa_eval import evaluate_qa
from tests.helpers import tiny_qa_config

K = 3


@pytest.fixture(scope="module")
def qa_run(qa_world, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("inspect-qa") / "qa"
    Finetuner(tiny_qa_config(qa_world, out, steps=4)).train()
    return out


@pytest.fixture(scope="module")
def questions(qa_world) -> list[str]:
    return [json.loads(line)["question"] for line in open(qa_world["questions"])][:3]


def _evaluated(run: Path, questions: list[str]) -> list[dict]:
    """``realm evaluate``'s records of ``questions`` (the path inspect must reuse)."""
    model, ctx, _ = load_qa_run(run)
    examples = [QAExample(question=q, answers=["-"], answers_are_regex=False, id=str(i)) for i, q in
                enumerate(questions)]  # fmt: skip
    return evaluate_qa(model, ctx.question_set(examples, K), ctx, top_k=(K,))[1]


def test_inspect_prints_the_readers_answer_beside_its_blocks(qa_run, questions, capsys):
    assert main(["inspect", str(qa_run), questions[0], "--k", str(K)]) == 0
    lines = capsys.readouterr().out.splitlines()
    want = _evaluated(qa_run, questions[:1])[0]
    assert lines[0] == f"query: {questions[0]}"
    assert lines[1].startswith(f"answer: {want['prediction']!r} from block {want['prediction_block']} (rank ")
    assert "QA model of step 4" in lines[2] and lines[3].split() == ["rank", "score", "block", "answer", "title", "text"]
    rows = lines[5:]
    assert [int(r.split()[2]) for r in rows] == want["block_ids"][:K] and len(rows) == K
    marked = [int(r.split()[2]) for r in rows if r.split()[3] == "*"]
    assert marked == [b for b in want["block_ids"][:K] if b == want["prediction_block"]]


def test_inspect_json_answers_each_query_of_a_file(qa_run, questions, tmp_path, capsys):
    plain, jsonl = tmp_path / "queries.txt", tmp_path / "queries.jsonl"
    plain.write_text("\n".join(questions) + "\n\n")
    jsonl.write_text("".join(json.dumps({"question" if i % 2 else "text": q}) + "\n" for i, q in enumerate(questions)))
    want = _evaluated(qa_run, questions)
    for file in (plain, jsonl):
        assert main(["inspect", str(qa_run), "--queries", str(file), "--k", str(K), "--json"]) == 0
        got = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [g["query"] for g in got] == questions and all(g["kind"] == "qa" for g in got)
        for g, w in zip(got, want):
            assert g["answer"] == w["prediction"] and g["answer_block"] == w["prediction_block"]
            blocks = g["blocks"]
            assert [b["rank"] for b in blocks] == list(range(1, K + 1))
            assert [b["block"] for b in blocks] == w["block_ids"][:K] and [b["score"] for b in blocks] == w["scores"][:K]
            assert [b["answer"] for b in blocks] == [b["block"] == w["prediction_block"] for b in blocks]
            assert all(b["title"] and b["text"] for b in blocks)


def test_inspect_qa_run_refuses_pretraining_options_and_bad_query_files(qa_run, tmp_path, capsys):
    assert main(["inspect", str(qa_run), "who?", "--index", "exact"]) == 2
    assert "is a QA run: --checkpoint, --index" in capsys.readouterr().err
    bad = tmp_path / "q.jsonl"
    bad.write_text('{"question": "Who?"}\n{"answer": "x"}\n')
    assert main(["inspect", str(qa_run), "--queries", str(bad)]) == 2
    assert f"{bad}:2: needs a non-empty string field 'question'" in capsys.readouterr().err
