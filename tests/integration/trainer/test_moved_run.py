"""A run folder moves (another mount, another node): launched from one directory with relative paths, as the demo
lays it out (tokenizer and blocks inside the pre-training run, a QA run nested in it, its sentences and questions
outside), then moved whole under a new name and used from a third directory: ``realm inspect``, ``realm evaluate``
and a resume all read it where it is now (realm.run.paths)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

from realm.cli.inspect import main_inspect
from realm.finetune.evaluate_qa import main as evaluate_main
from tests.helpers import subprocess_env


def _realm(cwd: Path, *args: str) -> str:
    """``realm ARGS`` run from ``cwd``; fails the test with its output on error."""
    proc = subprocess.run([sys.executable, "-m", "realm.cli.main", *args], cwd=cwd, env=subprocess_env(),
                          capture_output=True, text=True, timeout=180)  # fmt: skip
    assert proc.returncode == 0, (
        f"realm {args[0]} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    )
    return proc.stdout


def test_a_moved_run_is_inspected_evaluated_and_resumed(tiny_world, tmp_path: Path, monkeypatch, capsys) -> None:
    launch, elsewhere = tmp_path / "launch", tmp_path / "elsewhere"
    elsewhere.mkdir()
    for name in ("tokenizer", "blocks"):
        shutil.copytree(tiny_world[name], launch / "demo" / name)
    questions = str(tiny_world["questions"])
    # note: trained with centred queries, so QA (no retrieval flag) searches centred and its manifest says so
    _realm(launch, "train", "--config", "configs/pretrain/tiny.yaml", "--train.run_dir=demo", "--train.max_steps=2",
           "--data.tokenizer=demo/tokenizer", "--data.blocks=demo/blocks", f"--data.sentences={tiny_world['pretrain']}",
           f"--data.heldout={tiny_world['heldout']}", "--retriever.center_queries=true")  # fmt: skip
    _realm(launch, "finetune", "--config", "configs/finetune/demo.yaml", "--init.run=demo", "--train.run_dir=demo/qa",
           "--train.max_steps=2", "--train.batch_size=4", "--finetune.retriever_beam=5", "--finetune.eval_batch_size=8",
           "--task.max_dev_questions=8", f"--task.train={questions}", f"--task.dev={questions}")  # fmt: skip

    manifest = json.loads((launch / "demo" / "qa" / "model" / "manifest.json").read_text())
    assert manifest["retrieval"] == {"candidates": "dense", "center_queries": True}

    moved = tmp_path / "other-mount" / "renamed"
    shutil.move(launch / "demo", moved)
    shutil.rmtree(launch)  # note: nothing of the old location is left to fall back on

    monkeypatch.chdir(elsewhere)  # note: in this process, which saves two interpreters' start (imports) of the test
    assert main_inspect([str(moved), "Who founded the city?", "--k", "3"]) == 0
    shown = capsys.readouterr().out
    assert "index v-" in shown and "rank" in shown
    assert evaluate_main([str(moved / "qa"), "--task", "jsonl", "--data", questions, "--max-questions", "8",
                          "--name", "after-move"]) == 0  # fmt: skip
    assert json.loads((moved / "qa" / "eval" / "after-move" / "metrics.json").read_text())["num_questions"] == 8

    _realm(elsewhere, "train", "--config", str(moved / "config.yaml"), f"--train.run_dir={moved}",
           "--train.max_steps=3")  # fmt: skip
    steps = [json.loads(line).get("step") for line in (moved / "metrics.jsonl").read_text().splitlines()]
    assert 3 in steps and (moved / "checkpoints" / "step-00000003").is_dir()
    assert f"run_dir: {moved}\n" in (moved / "config.yaml").read_text()
    export = json.loads(next((moved / "retriever").glob("step-*/manifest.json")).read_text())
    assert (export["blocks"], export["tokenizer"]) == ("blocks", "tokenizer")  # inside the run: relative to it
