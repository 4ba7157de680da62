"""``realm real-text`` end to end on files in the real formats (a corpus as one JSON object, DPR's qas questions to
fine-tune on, NQ-open's jsonl to evaluate on), with a tiny encoder and a few steps a stage; the full run reports to
W&B offline, read back with ``tests.wandb_records``."""

from __future__ import annotations

import json

import pytest

from realm.cli.real_text import main
from realm.core.config import load_config
from realm.core.errors import ConfigError
from realm.data.jsonl import iter_jsonl
from realm.data.blocks import load_blocks
from realm.pipeline import layout, real_text
from realm.pipeline.real_text import RealTextConfig, run_real_text
from tests.helpers import ROOT
from tests.wandb_records import offline_runs

TINY = {
    "model": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64},
    "retriever": {"embed_dim": 16, "max_query_length": 24, "max_block_length": 48},
    "train": {"max_steps": 6, "eval_interval": 3, "save_interval": 6, "log_interval": 3},
    "refresh": {"refresh_interval": 3, "swap_lag": 1, "max_staleness": 6},
    "eval": {"max_examples": 20, "interval_examples": 10},
}


def _real_format_files(world, out):
    """The generated world rewritten as the Vital JSON object, DPR qas and NQ-open jsonl."""
    docs = {r["id"]: {"title": r["title"], "extract": r["text"]} for _, r in iter_jsonl(world["corpus"])}
    (out / "corpus.json").write_text(json.dumps(docs, indent=1))
    with (out / "train.qas").open("w") as handle:
        for _, r in iter_jsonl(world["questions_train"]):
            handle.write(f"{r['question']}\t{r['answers']!r}\n")
    dev = [{"question": r["question"], "answer": r["answers"]} for _, r in iter_jsonl(world["questions_heldout"])]
    (out / "dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in dev[:12]))
    return len(docs)


def test_stop_after_data_writes_vocabulary_blocks_and_cloze_sets_and_needs_no_questions(tiny_world, tmp_path):
    num_docs = _real_format_files(tiny_world, tmp_path)
    cfg = load_config(RealTextConfig, ROOT / "configs/real_text/default.yaml", {
        "out": str(tmp_path / "run"), "corpus": {"path": str(tmp_path / "corpus.json")}, "heldout_docs": 8,
        "vocab_size": 800, "tagging": {"kind": "rule"}, "stop_after": "data", "qa": {"train": "", "dev": ""}})  # fmt: skip
    summary = run_real_text(cfg)
    assert summary["num_documents"] == num_docs and summary["num_heldout"] > 0 and summary["num_pretrain"] > 0
    # the held-out articles (titles) are listed for the warm start, and X holds no sentence of theirs
    held = set(layout.heldout_articles(tmp_path / "run").read_text().splitlines())
    titles = {r["uid"]: r["title"] for r in load_blocks(layout.blocks_dir(tmp_path / "run"))}
    assert len(held) == 8 and held <= set(titles.values())
    x = iter_jsonl(layout.cloze_file(tmp_path / "run", "pretrain"))
    assert held.isdisjoint(titles[r["source_uid"]] for _, r in x)
    assert not layout.warmup_dir(tmp_path / "run").exists() and "data_s" in summary["stage_seconds"]
    with pytest.raises(ConfigError, match="qa.train and qa.dev must name question files"):
        run_real_text(load_config(RealTextConfig, None, {"corpus": {"path": "c.json"}, "out": str(tmp_path / "x")}))


def test_the_warm_start_and_x_are_given_the_held_out_articles_and_sentences(tiny_world, tmp_path, monkeypatch):
    _real_format_files(tiny_world, tmp_path)
    sentences = tmp_path / "heldout_sentences.txt"  # e.g. experiments/real_text/reachable_cloze.py's reachable items
    sentences.write_text("A sentence no stage may train on.\n")
    given, pretrain = {}, []

    class Stop(Exception):
        pass

    def warm_start(cfg, out, seed, data, model):
        given.update(data)
        raise Stop

    def pretrain_config(*args, **kwargs):
        pretrain.append(make_pretrain_config(*args, **kwargs))
        return pretrain[-1]

    make_pretrain_config = real_text.pretrain_config
    monkeypatch.setattr(real_text, "warm_start", warm_start)
    monkeypatch.setattr(real_text, "pretrain_config", pretrain_config)
    cfg = load_config(RealTextConfig, ROOT / "configs/real_text/default.yaml", {
        "out": str(tmp_path / "run"), "corpus": {"path": str(tmp_path / "corpus.json")}, "heldout_docs": 8,
        "vocab_size": 800, "tagging": {"kind": "rule"}, "stop_after": "warm_start", "qa": {"train": "", "dev": ""},
        "heldout_sentences": str(sentences),
    })  # fmt: skip
    with pytest.raises(Stop):
        run_real_text(cfg)
    assert given["heldout_articles"] == str(layout.heldout_articles(tmp_path / "run"))
    assert given["heldout_sentences"] == str(sentences)  # the reader warm-up and ICT skip them
    assert pretrain[0].data.heldout_sentences == str(sentences)  # and so does X


def _forget_wandb_dirs(monkeypatch) -> None:
    """The W&B folders the tracking module points into each stage's run directory, unset now and again at teardown
    (monkeypatch restores what it touched), so that no later test writes W&B files there."""
    for name in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_CONFIG_DIR", "WANDB_ARTIFACT_DIR",
                 "REALM_WANDB_ENV_OWNED"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)


@pytest.mark.slow
def test_the_real_text_command_runs_every_stage_on_real_formats(tiny_world, tmp_path, capsys, monkeypatch, request):
    num_docs = _real_format_files(tiny_world, tmp_path)
    out = tmp_path / "run"
    _forget_wandb_dirs(monkeypatch)
    import wandb

    request.addfinalizer(wandb.teardown)  # the W&B service this process started, also when the run fails
    code = main([
        f"--out={out}", f"--corpus.path={tmp_path / 'corpus.json'}", f"--qa.train={tmp_path / 'train.qas'}",
        f"--qa.dev={tmp_path / 'dev.jsonl'}", "--heldout_docs=8", "--max_heldout_sentences=30", "--vocab_size=800",
        "--tagging.kind=rule", "--warm_start.warmup_steps=4", "--warm_start.ict_steps=4", "--pretrain_steps=6",
        "--qa_steps=3",
        f"--pretrain_overrides={json.dumps(TINY)}", "--warm_start.copy_sentences=120",
        '--warm_start.copy_curriculum=[{"words": 20, "steps": 2}, {"words": 0, "steps": 2, "sentences": 3}]',
        "--tracking.report_to=wandb", "--tracking.wandb_mode=offline",  # pre-training's keys, for every stage
    ])  # fmt: skip
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert "REALM on real text" in capsys.readouterr().out
    assert summary["num_documents"] == num_docs and summary["pretrain_steps"] == 6
    assert summary["qa_num_questions"] == 12 and summary["num_index_refreshes"] >= 1
    for key in ("heldout_accuracy_retrieval", "heldout_accuracy_closed_book", "qa_exact_match_end"):
        assert 0.0 <= summary[key] <= 1.0
    # every stage published where the next one reads it
    for folder in ("tokenizer", "blocks", "copy/0_words_20/encoder", "copy/1_words_all/encoder", "warmup/encoder",
                   "ict/retriever", "qa"):  # fmt: skip
        assert (out / folder).is_dir(), folder
    assert {"copy_s", "warmup_s", "ict_s"} <= set(summary["stage_seconds"])
    # held-out articles never give a pre-training query
    x_uids = {r["source_uid"] for _, r in iter_jsonl(out / "cloze" / "pretrain.jsonl")}
    heldout = [r for _, r in iter_jsonl(out / "cloze" / "heldout.jsonl")]
    assert heldout and not x_uids & {r["source_uid"] for r in heldout}
    assert summary["num_heldout_examples"] == min(20, len(heldout))

    # --tracking.* reached every stage: one W&B group (the run directory's name), and a pipeline run holding the summary
    found = {}
    for stage in (out, out / "copy" / "0_words_20", out / "copy" / "1_words_all", out / "warmup", out / "ict",
                  out / "qa"):  # fmt: skip
        found |= {(stage.name, job): records for job, records in offline_runs(stage).items()}
    assert {job for _, job in found} == {"warmup", "ict", "trainer", "index_builder", "finetune", "pipeline"}
    assert len(found) == 8, sorted(found)  # the copy stages are warm-ups too, each in its own folder
    runs = [r.run for records in found.values() for r in records if r.WhichOneof("record_type") == "run"]
    assert {r.run_group for r in runs} == {"run"}
    logged = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for r in found[("run", "pipeline")]
              if r.WhichOneof("record_type") == "summary" for i in r.summary.update}  # fmt: skip
    assert logged["pretrain_steps"] == 6 and logged["qa_exact_match_end"] == summary["qa_exact_match_end"]
