"""``experiments/knnlm/knnlm_data.py``'s sources: a Vital article already in SQuAD or the passages (by title,
underscores as spaces, any case) is left out, so no article's text can be in two splits."""

from __future__ import annotations

import json

from experiments.knnlm import knnlm_data as data


def _write(root):
    (root / "squad").mkdir()
    squad = {"data": [{"title": "Amazon_rainforest", "paragraphs": [{"context": "The Amazon is wet."}]}]}
    (root / "squad/dev-v1.1.json").write_text(json.dumps(squad))
    (root / "wikipedia_passages").mkdir()
    (root / "wikipedia_passages/sample_data.jsonl").write_text(json.dumps({"contents": '"Rome"\nRome is old.'}) + "\n")
    (root / "wikipedia_vital10k").mkdir()
    vital = {t: {"title": t, "extract": f"{t} is a lead section."} for t in ("Amazon rainforest", "ROME", "Oslo")}
    vital["Empty"] = {"title": "Empty", "extract": ""}
    (root / "wikipedia_vital10k/summaries_en-us.json").write_text(json.dumps(vital))


def test_vital_articles_already_in_another_source_are_left_out(tmp_path, capsys):
    _write(tmp_path)
    articles = data.load_articles(tmp_path, ["squad", "wiki", "vital"])
    assert articles["squad"] == [("Amazon_rainforest", ["The Amazon is wet."])]
    assert articles["wiki"] == [("Rome", ["Rome is old."])]
    assert articles["vital"] == [("Oslo", ["Oslo is a lead section."])]
    assert json.loads(capsys.readouterr().out.strip()) == {"vital_articles": 1, "left_out_as_in_another_source": 2}
    assert list(data.load_articles(tmp_path, ["vital"])) == ["vital"]  # alone, every Vital article stays
    assert len(data.load_articles(tmp_path, ["vital"])["vital"]) == 3
