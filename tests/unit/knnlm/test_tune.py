"""``realm knnlm tune`` end to end on the tiny LM: the setting is chosen on validation before test is scored (a test
split that would choose another setting does not change it), test is reported once with a paired-bootstrap interval
written to tune.json, and leaked or article-sharing splits are refused with a clear message."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from realm.cli.main import main
from realm.data.corpus import CorpusConfig
from realm.knnlm import perplexity as ev
from realm.knnlm.datastore import DatastoreConfig, load_datastore
from realm.knnlm.datastore_build import build_datastore, read_texts
from realm.knnlm.lm import LMConfig, load_causal_lm, tokenize_documents
from realm.knnlm_jobs.tune import RESULTS_FILE, TABLE_FILE, VALID_SWEEP_FILE

LM_ARGS = ["--lm.context_length=32", "--lm.stride=16", "--lm.batch_size=8"]
GRID = ["--sweep.ks=[4,16]", "--sweep.taus=[1.0,10.0]", "--sweep.lambdas=[0.1,0.5,0.9]"]
GRID_VALUES = ([4, 16], [1.0, 10.0], [0.1, 0.5, 0.9])


@pytest.fixture(scope="module")
def setup(tiny_lm, tmp_path_factory):
    """The LM, a datastore of its training corpus, and jsonl splits: validation = 10 held-out documents, test = 10
    other held-out ones, leaked = 10 documents of the datastore's own text."""
    lm, train, heldout = tiny_lm
    folder = tmp_path_factory.mktemp("tune")
    build_datastore(folder / "ds", LMConfig(model=str(lm), context_length=32, stride=16), CorpusConfig(path=str(train)),
                    DatastoreConfig())  # fmt: skip
    held, seen = heldout.read_text().splitlines(), train.read_text().splitlines()
    paths = {}
    for name, lines in (("valid", held[:10]), ("test", held[10:20]), ("leaked", seen[:10])):
        paths[name] = folder / f"{name}.jsonl"
        paths[name].write_text("\n".join(lines) + "\n")
    return lm, train, folder / "ds", paths


def _args(setup, test: Path, out: Path, *extra: str) -> list[str]:
    lm, _, ds, paths = setup
    return ["knnlm", "tune", f"--lm.model={lm}", f"--datastore={ds}", f"--valid.path={paths['valid']}",
            f"--test.path={test}", f"--out={out}", *LM_ARGS, *GRID, "--bootstrap.num_resamples=200",
            *extra]  # fmt: skip


def _best_on(setup, path: Path) -> dict:
    """The grid's lowest perplexity on ``path``, computed here without the command."""
    lm, _, ds, _ = setup
    cfg = LMConfig(model=str(lm), context_length=32, stride=16, batch_size=8)
    model, tokenizer = load_causal_lm(cfg)
    docs = tokenize_documents(tokenizer, read_texts(CorpusConfig(path=str(path))))
    neighbours = ev.collect(model, docs, cfg, load_datastore(ds), ev.KNNConfig(k=16))
    return ev.best(ev.sweep(neighbours, *GRID_VALUES)), neighbours


def test_settings_are_chosen_on_validation_before_test_is_scored(setup, tmp_path, monkeypatch, capsys):
    _, _, _, paths = setup
    events = []
    collect, sweep = ev.collect, ev.sweep

    def recording_collect(model, docs, *args, **kwargs):
        events.append(("collect", len(docs), int(sum(len(d) - 1 for d in docs))))
        return collect(model, docs, *args, **kwargs)

    def recording_sweep(neighbours, *args):
        events.append(("sweep", neighbours.num_tokens))
        return sweep(neighbours, *args)

    monkeypatch.setattr(ev, "collect", recording_collect)
    monkeypatch.setattr(ev, "sweep", recording_sweep)
    # the leaked split is the datastore's own text: on it the grid would choose another setting (lambda 0.9, k 4)
    out = tmp_path / "tune"
    assert main(_args(setup, paths["leaked"], out, "--overlap.action=report", "--overlap.max_fraction=0.2")) == 0
    monkeypatch.undo()
    (_, _, valid_tokens), (_, _, test_tokens) = events[0], events[2]
    assert [e[0] for e in events] == ["collect", "sweep", "collect"]  # test is scored once, after the choice
    assert events[1] == ("sweep", valid_tokens) and valid_tokens != test_tokens  # selection saw validation only
    result = json.loads((out / RESULTS_FILE).read_text())
    on_valid, _ = _best_on(setup, paths["valid"])
    on_test, test_neighbours = _best_on(setup, paths["leaked"])
    chosen = result["chosen"]
    assert (chosen["k"], chosen["tau"], chosen["lambda"]) == (on_valid["k"], on_valid["tau"], on_valid["lambda"])
    assert (on_test["k"], on_test["tau"], on_test["lambda"]) != (on_valid["k"], on_valid["tau"], on_valid["lambda"])
    assert chosen["chosen_on"] == "validation" and chosen["grid_size"] == 12
    reported = ev.score(test_neighbours, chosen["k"], chosen["tau"], chosen["lambda"])
    assert result["test"]["ppl_knnlm"] == pytest.approx(reported["ppl_knnlm"], rel=1e-5)
    assert result["test"]["ppl_lm"] == pytest.approx(reported["ppl_lm"], rel=1e-5)
    diff = result["difference"]
    assert diff["ci_low"] <= diff["relative_change"] <= diff["ci_high"] < 0  # the leaked text is copied: far lower
    assert diff["relative_change"] == pytest.approx(reported["ppl_knnlm"] / reported["ppl_lm"] - 1, rel=1e-5)
    assert diff["num_resamples"] == 200 and diff["confidence"] == 0.95 and diff["unit"] == "token"
    leak = {o["what"]: o for o in result["checks"]["ngram_overlap"]}
    # note: the generated world's sentences are templated, so a held-out text may share a 32-token phrase with it
    assert leak["test vs datastore"]["fraction"] == 1.0 and leak["validation vs datastore"]["fraction"] < 0.2
    assert result["checks"]["reported_leaks"] == ["test vs datastore"]
    assert len((out / VALID_SWEEP_FILE).read_text().splitlines()) == 12
    table = (out / TABLE_FILE).read_text()
    assert table.strip() in capsys.readouterr().out and "WARNING: leaks reported, not refused" in table


def test_a_clean_test_split_is_reported_with_its_interval_and_no_warning(setup, tmp_path):
    _, _, _, paths = setup
    args = _args(setup, paths["test"], tmp_path / "t", "--bootstrap.unit=document", "--overlap.max_fraction=0.2")
    assert main(args) == 0
    result = json.loads((tmp_path / "t" / RESULTS_FILE).read_text())
    assert result["checks"]["reported_leaks"] == [] and result["difference"]["num_units"] == 10
    assert all(o["fraction"] <= 0.2 for o in result["checks"]["ngram_overlap"])
    assert result["test"]["documents"] == result["test"]["articles"] == 10
    assert "WARNING" not in (tmp_path / "t" / TABLE_FILE).read_text()


def test_a_test_split_in_the_datastore_is_refused(setup, tmp_path, capsys):
    _, _, _, paths = setup
    assert main(_args(setup, paths["leaked"], tmp_path / "r")) == 2
    err = capsys.readouterr().err
    assert re.search(r"test vs datastore: (\d+) of \1 evaluation tokens \(100.00%, in 10 documents\)", err)
    assert "e.g. document 0 at token 0" in err
    assert "--overlap.action=report" in err and not (tmp_path / "r" / RESULTS_FILE).exists()


def test_the_datastores_articles_are_checked_when_its_text_is_given(setup, tmp_path, capsys):
    _, train, _, paths = setup
    args = _args(setup, paths["leaked"], tmp_path / "a", f"--datastore_corpus.path={train}")
    assert main(args) == 2
    assert "the datastore's text and test share 10 article(s)" in capsys.readouterr().err
    reported = _args(setup, paths["leaked"], tmp_path / "c", f"--datastore_corpus.path={train}",
                     "--overlap.action=report")  # fmt: skip
    assert main(reported) == 0
    checks = json.loads((tmp_path / "c" / RESULTS_FILE).read_text())["checks"]
    assert checks["datastore_articles"]["shared_with_test"] == 10 and checks["datastore_articles"]["articles"] == 60
    assert "datastore articles shared_with_test" in checks["reported_leaks"]
    assert main(_args(setup, paths["leaked"], tmp_path / "b", f"--datastore_corpus.path={paths['valid']}")) == 2
    assert "is not the text" in capsys.readouterr().err


def test_validation_and_test_sharing_an_article_are_refused(setup, tmp_path, capsys):
    _, _, _, paths = setup
    first = json.loads(paths["valid"].read_text().splitlines()[0])
    shared = tmp_path / "shared.jsonl"
    other = {**first, "id": "another-paragraph", "text": "A different paragraph of the same article."}
    shared.write_text(paths["test"].read_text() + json.dumps(other) + "\n")
    assert main(_args(setup, shared, tmp_path / "s")) == 2
    assert f"validation and test share 1 article(s) (e.g. {first['title']!r})" in capsys.readouterr().err
    assert main(["knnlm", "tune", "--out=x"]) == 2
    assert "--valid.path, --test.path, --lm.model, --datastore" in capsys.readouterr().err
