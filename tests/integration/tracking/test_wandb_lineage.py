"""W&B as a researcher reads it, offline: a tiny pre-training run then a QA run from it, both with
``--tracking.report_to=wandb --tracking.wandb_mode=offline``; their ``.wandb`` files are read back
(``wandb_records``) for the artefacts and their lineage, the summaries and the long retrieval table."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from realm.pipeline import layout
from tests.helpers import ROOT, data_overrides, subprocess_env
from tests.wandb_records import offline_runs

pytestmark = pytest.mark.slow
OFFLINE = ["--tracking.report_to=wandb", "--tracking.wandb_mode=offline"]


def _run(module: str, *args: str) -> None:
    env = {**subprocess_env(), "WANDB_MODE": "offline"}
    proc = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=240)  # fmt: skip
    assert proc.returncode == 0, f"{module} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"


def _of(records, kind: str) -> list:
    return [getattr(r, kind) for r in records if r.WhichOneof("record_type") == kind]


def _artifacts(records) -> dict[tuple[str, str], object]:
    """``{(name, alias): artifact record}`` of a run (the alias other than ``latest``; run tables left out)."""
    found = {}
    for art in _of(records, "artifact"):
        if art.type != "run_table":
            (alias,) = [a for a in art.aliases if a != "latest"]
            found[(art.name, alias)] = art
    return found


def _key(item) -> str:
    """An item's key (wandb-core writes some as a one-element ``nested_key``)."""
    return item.key or "/".join(item.nested_key)


def _summary(records) -> dict:
    return {_key(i): json.loads(i.value_json) for s in _of(records, "summary") for i in s.update}


def test_pretraining_and_qa_log_artefacts_with_lineage_summaries_and_long_tables(tiny_world, tmp_path: Path):
    run = tmp_path / "run"
    _run("realm.trainer.pretrain", "--config", "configs/pretrain/tiny.yaml", f"--train.run_dir={run}",
         "--train.max_steps=4", "--tracking.num_inspect_rows=2", *data_overrides(tiny_world), *OFFLINE)  # fmt: skip
    questions = str(tiny_world["questions"])
    _run("realm.finetune.train", "--config", "configs/finetune/demo.yaml", f"--init.run={run}",
         f"--train.run_dir={run / 'qa'}", "--train.max_steps=2", "--train.batch_size=4", "--finetune.retriever_beam=5",
         "--finetune.eval_batch_size=8", "--task.max_dev_questions=8", f"--task.train={questions}",
         f"--task.dev={questions}", *OFFLINE)  # fmt: skip

    runs = offline_runs(run)
    assert set(runs) == {"trainer", "index_builder"}
    trainer = _artifacts(runs["trainer"])
    # every retriever export an output, every index version swapped in an input, the last checkpoint the model
    outputs = {key: a for key, a in trainer.items() if not a.use_after_commit}
    inputs = {key: a for key, a in trainer.items() if a.use_after_commit}
    assert set(outputs) == {("run-retriever", "step-00000000"), ("run-retriever", "step-00000002"),
                            ("run-retriever", "step-00000004"), ("run-model", "step-00000004")}  # fmt: skip
    assert set(inputs) == {("run-index", "v-00000000"), ("run-index", "v-00000002")}
    assert {a.type for a in outputs.values()} == {"retriever", "model"}
    assert {a.type for a in inputs.values()} == {"index"}
    for art in trainer.values():
        metadata = json.loads(art.metadata)
        assert metadata["config"]["train"]["run_dir"] == str(run)  # the run's config travels with each artefact
        copied = [e for e in art.manifest.contents if not e.ref]
        assert [e.path.rsplit("/", 1)[-1] for e in copied] == ["manifest.json"]  # weights are references, not copies
        assert all(e.ref.startswith("file://") for e in art.manifest.contents if e not in copied)
    # the builder's run: each export it embedded an input, each version it published an output (export -> index)
    builder = _artifacts(runs["index_builder"])
    assert ("run-index", "v-00000000") in builder and not builder[("run-index", "v-00000000")].use_after_commit
    assert builder[("run-retriever", "step-00000000")].use_after_commit
    index_meta = json.loads(trainer[("run-index", "v-00000002")].metadata)
    assert index_meta["retriever"] == "run-retriever:step-00000002"  # which export each version embeds
    summary = _summary(runs["trainer"])
    assert summary["step"] == 4 and summary["num_retriever_exports"] == 3 and summary["model"] == str(run / "model")

    # the retrieval table in long format: one row per query x slot
    lines = [json.loads(line) for line in (run / "retrievals.jsonl").read_text().splitlines()]
    tables = sorted((p for p in (run / "wandb").glob("offline-run-*/files/media/table/inspect/*.table.json")),
                    key=lambda p: int(p.name.split("_")[1]))  # fmt: skip
    assert len(tables) == 2  # steps 2 and 4
    table = json.loads(tables[-1].read_text())
    column = {name: i for i, name in enumerate(table["columns"])}
    assert {"step", "example_id", "query", "slot", "block_id", "title", "p_z", "p_y", "has_gold"} <= set(column)
    last = [line for line in lines if line["step"] == 4]
    assert len(table["data"]) == sum(len(line["slots"]) for line in last) == 2 * len(last[0]["slots"])
    assert [row[column["slot"]] for row in table["data"]] == [k for line in last for k in range(len(line["slots"]))]
    assert [row[column["block_id"]] for row in table["data"]] == [s["block_id"] for line in last for s in line["slots"]]

    qa_runs = offline_runs(run / "qa")
    assert set(qa_runs) == {"finetune"}
    qa = _artifacts(qa_runs["finetune"])
    used = qa[("run-model", "step-00000004")]
    assert used.use_after_commit and used.type == "model"
    # the same version the pre-training run logged: W&B links the two runs through it
    assert used.digest == trainer[("run-model", "step-00000004")].digest
    assert not qa[("qa-qa-index", "v-00000000")].use_after_commit  # its frozen index, built here
    qa_model = qa[("qa-qa-model", "step-00000002")]
    assert qa_model.type == "qa-model" and not qa_model.use_after_commit
    assert json.loads(qa_model.metadata)["config"]["init"]["run"] == str(run)
    qa_summary = _summary(qa_runs["finetune"])
    assert qa_summary["step"] == 2 and "eval/exact_match" in qa_summary
    assert qa_summary["model"] == str(run / "qa" / "model")


def test_the_warm_starts_are_tracked_and_publish_artefacts(tiny_world, tmp_path: Path):
    tiny = ["--model.hidden_size=32", "--model.num_layers=1", "--model.num_heads=2", "--model.intermediate_size=64",
            "--model.max_position_embeddings=128", "--retriever.max_block_length=48", "--train.max_steps=2",
            "--train.batch_size=8", "--train.log_interval=1", "--train.num_threads=1",
            f"--data.tokenizer={tiny_world['tokenizer']}", f"--data.blocks={tiny_world['blocks']}",
            "--tracking.run_name=tiny", *OFFLINE]  # fmt: skip
    _run("realm.warmstart.ict_train", "--config", "configs/ict/demo.yaml", f"--train.run_dir={tmp_path / 'ict'}",
         "--retriever.embed_dim=16", *tiny)  # fmt: skip
    _run("realm.warmstart.warmup", "--config", "configs/warmup/demo.yaml", f"--train.run_dir={tmp_path / 'warmup'}",
         *tiny)  # fmt: skip

    for job, folder, name, type_, metric in (("ict", "retriever", "tiny-ict-retriever", "retriever", "ict/loss"),
                                             ("warmup", "encoder", "tiny-warmup-encoder", "model", "warmup/loss")):
        (records,) = offline_runs(tmp_path / job).values()
        (run,) = _of(records, "run")
        assert (run.job_type, run.run_group, run.display_name) == (job, "tiny", f"tiny-{job}")  # one group per run
        assert {_key(i) for h in _of(records, "history") for i in h.item} >= {metric}  # its metrics reach W&B
        art = _artifacts(records)[(name, "step-00000002")]
        assert art.type == type_ and not art.use_after_commit
        assert json.loads(art.metadata)["config"]["train"]["run_dir"] == str(tmp_path / job)
        summary = _summary(records)
        assert summary["step"] == 2 and summary["output"] == str(tmp_path / job / folder)


def test_the_demos_tracking_reaches_every_stage_in_one_group(tmp_path: Path):
    """``realm demo --tracking.report_to=wandb``: the warm-up, ICT, trainer, builder and QA runs, and the pipeline's
    summary run, all in one W&B group (the run directory's name)."""
    run = tmp_path / "demo"
    _run("realm.cli.demo", f"--out={run}", "--num_entities=64", "--warm_start.warmup_steps=2",
         "--warm_start.ict_steps=2", "--pretrain_steps=4", "--qa_steps=2", *OFFLINE)  # fmt: skip
    found = {}
    for stage in (layout.pretrain_run(run), layout.warmup_dir(run), layout.ict_dir(run), layout.qa_run(run)):
        found |= offline_runs(stage)
    assert set(found) == {"warmup", "ict", "trainer", "index_builder", "finetune", "pipeline"}, set(found)
    groups = {r.run.run_group for records in found.values() for r in records if r.WhichOneof("record_type") == "run"}
    assert groups == {"demo"}
