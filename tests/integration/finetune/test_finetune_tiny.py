"""A tiny QA fine-tuning run on questions generated from a small world: exact match must rise well above the start;
``realm evaluate`` then reproduces the final dev figures from the published model and writes its predictions."""

import json
from pathlib import Path

import pytest

from realm.core.errors import run_command
from realm.finetune.evaluate_qa import main as evaluate_main
from realm.finetune.train import Finetuner
from tests.helpers import tiny_qa_config as _config

pytestmark = pytest.mark.slow


def test_finetuning_improves_exact_match_and_evaluate_reproduces_it(qa_world, tmp_path: Path, capsys) -> None:
    out = tmp_path / "qa"
    Finetuner(_config(qa_world, out, steps=120)).train()
    start = json.loads((out / "eval" / "dev-step-0" / "metrics.json").read_text())
    end = json.loads((out / "eval" / "dev-step-120" / "metrics.json").read_text())
    assert start["num_questions"] == end["num_questions"] == sum(1 for _ in open(qa_world["questions"]))
    assert end["exact_match"] >= start["exact_match"] + 0.3, (start, end)
    losses = [json.loads(line)["train/loss"] for line in open(out / "metrics.jsonl") if "train/loss" in line]
    assert losses[-1] < losses[0]

    code = evaluate_main([str(out), "--task", "jsonl", "--data", str(qa_world["questions"]), "--name", "again"])
    assert code == 0
    again = json.loads((out / "eval" / "again" / "metrics.json").read_text())
    assert again == pytest.approx(end)
    records = [json.loads(line) for line in open(out / "eval" / "again" / "predictions.jsonl")]
    assert len(records) == end["num_questions"]
    first = records[0]
    assert {"question", "answers", "prediction", "block_ids", "titles", "scores", "has_answer", "correct"} <= set(first)
    assert len(first["block_ids"]) == len(first["titles"]) == len(first["scores"]) == len(first["has_answer"])
    assert first["scores"] == sorted(first["scores"], reverse=True)
    assert sum(r["correct"] for r in records) / len(records) == pytest.approx(end["exact_match"])
    # the same retrieval as DPR ctxs records and a TREC run, in the predictions' order (realm.run.export_retrieval)
    dpr = json.loads((out / "eval" / "again" / "retrieval.dpr.json").read_text())
    retrieved = [[str(i) for i in r["block_ids"] if i >= 0] for r in records]
    assert [[c["id"] for c in d["ctxs"]] for d in dpr] == retrieved and dpr[0]["question"] == first["question"]
    trec = [line.split() for line in (out / "eval" / "again" / "run.trec").read_text().splitlines()]
    assert len(trec) == sum(map(len, retrieved)) and trec[0][1:4] == ["Q0", retrieved[0][0], "1"]


def test_evaluate_reports_a_missing_model_in_one_line(tmp_path: Path, capsys) -> None:
    code = run_command("realm evaluate", evaluate_main, [str(tmp_path), "--task", "nq", "--data", str(tmp_path / "none.jsonl")])
    assert code == 2
    assert "no published model/" in capsys.readouterr().err


def test_finetune_reports_a_malformed_question_line_before_any_model_work(tmp_path: Path, capsys) -> None:
    from realm.cli.main import main as realm_main

    bad = tmp_path / "q.jsonl"
    bad.write_text('{"question": "Who?", "answers": ["A"]}\n{"question": "Where?"}\n')
    code = realm_main(["finetune", "--task.name=jsonl", f"--task.train={bad}", f"--train.run_dir={tmp_path / 'out'}"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"{bad}:2" in err and "answers" in err
    assert not (tmp_path / "out" / "index").exists()
