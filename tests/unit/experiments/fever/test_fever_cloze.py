"""``experiments/fever/fever_cloze.py``: it writes the items and prints each count, and the items file is read by the
evaluation ``experiments/real_text/realm_stage.py`` runs on every endpoint (``evaluate_loaded``): one outcome per item,
gold recall reported."""

from __future__ import annotations

import json
import re

from experiments.common import cloze_eval
from experiments.common.title_links import corpus_articles
from experiments.fever import fever_cloze as fever
from experiments.fever.cloze_items import FeverClozeConfig, write_fever_cloze
from realm.data.sentences import split_sentences
from realm.data.tagging import RuleTagger
from realm.pretrain.saved_run import load_run
from tests.unit.cli.test_cli import tiny_run  # noqa: F401 - the fixture: a run with a checkpoint and a live index
from tests.unit.experiments.fever.fever_lines import BLOCKS, LINES


def _write(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_the_bench_writes_the_items_and_prints_every_count(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(fever, "corpus_blocks", lambda args, out: BLOCKS)
    path, out = _write(tmp_path / "dev.jsonl", LINES), tmp_path / "out"
    assert fever.main(["--corpus", "unused", "--fever", str(path), "--out", str(out), "--tagger", "rule",
                       "--json", str(tmp_path / "r.json")]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "10 FEVER claims read (1 NOT ENOUGH INFO); 8 SUPPORTS" in printed
    assert "items (one per claim): 4" in printed and "span_not_in_evidence 1" in printed
    result = json.loads((tmp_path / "r.json").read_text())
    assert (result["items"], result["qualifying_spans"], result["supports_outside_corpus"]) == (4, 5, 1)
    assert len((out / "fever_supports.jsonl").read_text().splitlines()) == 4


def _page_id(title: str) -> str:
    return title.replace("(", "-LRB-").replace(")", "-RRB-").replace(" ", "_")


def test_the_stage_evaluation_reads_the_items_one_outcome_each(tiny_run, tmp_path):  # noqa: F811
    blocks = load_run(tiny_run).store.blocks
    # note: the toy world states each person's birth date in their lead ("X was born on 10 March 1940 into ...")
    born = re.compile(r"was born on \d+ \w+ \d{4}")
    lines = []
    for title, text in zip(blocks["title"], blocks["text"]):
        said = [text[s:e] for s, e in split_sentences(text) if born.search(text[s:e])]
        if title and said:
            lines.append({"id": len(lines), "label": "SUPPORTS", "claim": said[0],
                          "evidence": [[[0, 0, _page_id(title), 0]]]})  # fmt: skip
    lines = lines[:3]
    assert len(lines) == 3
    made = write_fever_cloze(_write(tmp_path / "dev.jsonl", lines), corpus_articles(blocks), tmp_path / "out",
                             RuleTagger(), FeverClozeConfig())  # fmt: skip
    assert made.counts["items"] == 3
    result = cloze_eval.evaluate_cloze(tiny_run, {"fever": made.items})["sets"]["fever"]
    assert result["items"] == 3 and len(result["span_correct"]) == 3
    assert 0 <= result["gold_recall_at_1"] <= result["gold_recall_at_k"] <= 1
