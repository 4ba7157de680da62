"""``retrieval.candidates=bm25``: a tiny fine-tuning run trains and evaluates on BM25's blocks without ever searching
the frozen index, records the mode, and ``realm evaluate`` reads the same candidates; a bad value is refused."""

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from realm.core.config import load_config
from realm.core.errors import ConfigError
from realm.data.blocks import load_blocks
from realm.finetune.evaluate_qa import main as evaluate_main
from realm.finetune.train import FinetuneConfig, Finetuner
from realm.index import versions
from realm.index.text_bm25 import TextBM25, titled_texts
from realm.qa.candidates import RetrievalConfig
from realm.qa.datasets import load_task
from realm.qa.model import OpenQAModel
from tests.helpers import tiny_qa_config

pytest.importorskip("bm25s")


def _no_search(self, queries, k):
    raise AssertionError("the frozen index was searched with retrieval.candidates=bm25")


@pytest.mark.slow
def test_bm25_candidates_run_end_to_end_and_evaluate_reads_them(qa_world, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(versions.PublishedIndex, "search", _no_search)
    calls = {"forward": 0, "embed_queries": 0}
    for name in calls:  # note: the query tower runs once per batch, in the model's forward: no pass for a search
        original = getattr(OpenQAModel, name)

        def counted(self, *args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(OpenQAModel, name, counted)
    out = tmp_path / "qa"
    cfg = dataclasses.replace(tiny_qa_config(qa_world, out, steps=4), retrieval=RetrievalConfig(candidates="bm25"))
    Finetuner(cfg).train()
    assert calls["forward"] > 4 and calls["embed_queries"] == calls["forward"]
    # note: config.yaml keeps the config as given (centring "as trained"); the manifest, which `realm evaluate`
    # searches by, the resolved value: bm25 has no dense queries to centre
    assert yaml.safe_load((out / "config.yaml").read_text())["retrieval"] == {"candidates": "bm25",
                                                                            "center_queries": None}
    assert json.loads((out / "model" / "manifest.json").read_text())["retrieval"] == {"candidates": "bm25",
                                                                                    "center_queries": False}

    # note: the library ranker is checked against bm25s itself in tests/unit/qa/test_candidates.py
    blocks = load_blocks(qa_world["blocks"])
    questions = load_task("jsonl", str(qa_world["questions"]))
    expected = TextBM25(titled_texts(blocks["title"], blocks["text"])).rank([q.question for q in questions], 100)
    end = out / "eval" / "dev-step-4"
    records = [json.loads(line) for line in open(end / "predictions.jsonl")]
    assert [r["block_ids"] for r in records] == expected.tolist()

    assert evaluate_main([str(out), "--task", "jsonl", "--data", str(qa_world["questions"]), "--name", "again"]) == 0
    again = [json.loads(line) for line in open(out / "eval" / "again" / "predictions.jsonl")]
    assert [r["block_ids"] for r in again] == expected.tolist()
    metrics = json.loads((end / "metrics.json").read_text())
    assert json.loads((out / "eval" / "again" / "metrics.json").read_text()) == pytest.approx(metrics)


def test_an_unknown_candidate_source_is_refused_naming_the_override() -> None:
    with pytest.raises(ConfigError, match=r"retrieval\.candidates.*'tfidf'"):
        load_config(FinetuneConfig, overrides=["--retrieval.candidates=tfidf"])
