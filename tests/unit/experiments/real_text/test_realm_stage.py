"""``experiments/real_text/realm_stage.py`` (issue 55 items 3-4): each row's pre-training keys, the resume plan (a
finished evaluation skipped, the checkpoint of the step evaluated), and the pre-registered analysis (exact McNemar of
REALM's last step against each control's, Holm over the seed's family) on synthetic per-item outcome files."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from experiments.real_text import realm_stage as stage
from experiments.real_text import realm_stage_analysis as analysis
from realm.core.config import load_config, parse_overrides
from realm.pipeline import layout
from realm.pretrain.config import PretrainConfig
from tests.helpers import ROOT


def test_each_row_adds_its_own_key_after_the_users_and_warm_does_not_train():
    user = ["refresh.refresh_interval=50"]
    assert stage.row_overrides("warm", user) is None
    assert stage.row_overrides("realm", user) == ["--refresh.refresh_interval=50"]
    assert stage.row_overrides("closed_book", user) == ["--refresh.refresh_interval=50", "--train.loss=closed_book"]
    assert stage.row_overrides("frozen", user)[-1] == "--retriever.frozen=true"
    # note: a --set of the row's own key comes first, so the row's wins
    assert stage.row_overrides("closed_book", ["train.loss=per_token"])[-1] == "--train.loss=closed_book"
    with pytest.raises(stage.BenchError, match="unknown row 'stale'"):
        stage.row_overrides("stale", [])
    loaded = load_config(PretrainConfig, None, parse_overrides(stage.row_overrides("closed_book", [])))
    assert loaded.train.loss == "closed_book"  # the key path is the real one


def test_warm_is_evaluated_at_step_0_and_the_trained_rows_at_the_others():
    assert stage.row_steps("warm", [0, 2, 4]) == [0]
    assert stage.row_steps("frozen", [0, 2, 4]) == [2, 4]
    assert stage.save_interval([0, 1000, 2000, 3000]) == 1000 and stage.save_interval([0, 4, 6]) == 2


def test_the_plan_trains_to_the_next_step_evaluates_its_checkpoint_and_skips_finished_evaluations():
    assert stage.next_action([2, 4], set(), set()) == ("train", 2)
    assert stage.next_action([2, 4], set(), {2}) == ("evaluate", 2)
    assert stage.next_action([2, 4], {2}, {2}) == ("train", 4)
    assert stage.next_action([2, 4], {2}, {2, 4}) == ("evaluate", 4)
    assert stage.next_action([2, 4], {2, 4}, {4}) is None
    assert stage.next_action([0], set(), set()) == ("evaluate", 0)  # the start needs no checkpoint
    with pytest.raises(stage.BenchError, match="trained past step 2"):
        stage.next_action([2, 4], set(), {4})


def test_a_rerun_evaluates_only_the_missing_step_from_its_own_checkpoint(tmp_path, monkeypatch):
    row_dir = tmp_path / "realm"
    done = stage.eval_file(row_dir, 4)
    done.parent.mkdir(parents=True)
    done.write_text("{}")
    cfg = SimpleNamespace(train=SimpleNamespace(run_dir=str(row_dir)))
    loaded, trained = [], []
    monkeypatch.setattr(stage, "start_config", lambda args, row, out: cfg)
    published = [(2, tmp_path / "c2"), (4, tmp_path / "c4")]
    monkeypatch.setattr(stage, "list_published", lambda parent, prefix: published)
    monkeypatch.setattr(stage, "train_to", lambda cfg, step: trained.append(step))

    def load_run(run_dir, checkpoint):
        loaded.append(checkpoint)
        if len(loaded) > 2:  # note: a plan that never counts a step as done would loop here forever
            raise AssertionError(f"evaluated again: {loaded}")
        return SimpleNamespace(model=SimpleNamespace(to=lambda device: None), checkpoint=checkpoint)

    monkeypatch.setattr(stage, "load_run", load_run)
    monkeypatch.setattr(stage, "evaluate_loaded", lambda run, files: {"step": 2, "sets": {}})
    args = SimpleNamespace(eval_at=[0, 2, 4], seed=3)
    stage.run_row(args, "realm", tmp_path, {}, "cpu")
    assert loaded == [str(tmp_path / "c2")] and trained == []  # step 2's checkpoint, not the newest
    assert done.read_text() == "{}"  # the finished evaluation is not redone
    assert json.loads(stage.eval_file(row_dir, 2).read_text())["seed"] == 3


def test_a_row_config_is_the_pipelines_with_the_stages_schedule_and_the_rows_key(tmp_path):
    start = tmp_path / "start"
    for folder in ("blocks", "ict/retriever", "warmup/encoder", "tokenizer", "cloze"):
        (start / folder).mkdir(parents=True)
    (start / "cloze" / "pretrain.jsonl").write_text("")
    args = SimpleNamespace(start=str(start), config=str(ROOT / "configs/real_text/default.yaml"), init_from=None,
                           seed=5, steps=6, eval_at=[0, 2, 4, 6], set=["refresh.refresh_interval=100"],
                           heldout_sentences="/x/heldout_sentences.txt",
                           pipeline_set=["tagging.kind=rule"])  # fmt: skip
    cfg = stage.start_config(args, "closed_book", tmp_path / "out")
    assert cfg.train.loss == "closed_book" and cfg.refresh.refresh_interval == 100
    assert Path(cfg.train.run_dir) == tmp_path / "out" / "closed_book"
    assert (cfg.train.max_steps, cfg.train.save_interval, cfg.train.seed) == (6, 2, 5)
    assert Path(cfg.train.init_retriever) == layout.ict_retriever(start)
    assert Path(cfg.train.init_encoder) == layout.warmup_encoder(start)
    assert Path(cfg.data.sentences) == layout.cloze_file(start, "pretrain")
    assert cfg.data.heldout_sentences == "/x/heldout_sentences.txt" and cfg.data.tagging.kind == "rule"
    realm = stage.start_config(args, "realm", tmp_path / "out")
    assert realm.train.loss == "per_token"


def _write(out: Path, row: str, step: int, sets: dict[str, list[int]]) -> None:
    path = analysis.eval_file(out / row, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    figures = {name: {"items": len(v), "span_accuracy": sum(v) / len(v), "closed_book_span_accuracy": 0.0,
                      "span_correct": v, "closed_book_span_correct": [0] * len(v)} for name, v in sets.items()}
    path.write_text(json.dumps({"row": row, "step": step, "sets": figures}))


def _control(only_realm: int, only_control: int) -> list[int]:
    """Outcomes against REALM's ``[1]*10 + [0]*10``, disagreeing as asked."""
    return [0] * only_realm + [1] * (10 - only_realm) + [1] * only_control + [0] * (10 - only_control)


def _synthetic_seed(out: Path, with_frozen: bool = True) -> None:
    realm = [1] * 10 + [0] * 10
    (out).mkdir(parents=True)
    # note: no "primary": every endpoint is, as without --primary
    (out / analysis.STAGE_FILE).write_text(json.dumps({"seed": 0, "eval_at": [0, 2, 4], "cloze": {"a": "", "b": ""}}))
    _write(out, "realm", 2, {"a": [0] * 20, "b": [0] * 20})  # an earlier step, which the test must not read
    _write(out, "realm", 4, {"a": realm, "b": realm})
    _write(out, "warm", 0, {"a": _control(8, 1), "b": _control(10, 0)})
    _write(out, "closed_book", 4, {"a": _control(6, 0), "b": _control(0, 0)})
    if with_frozen:
        _write(out, "frozen", 4, {"a": _control(2, 2), "b": _control(3, 0)})


def test_holm_adjusts_by_rank_and_stays_monotone():
    # by hand: 0.01*4 = 0.04; 0.03*3 = 0.09; 0.04*2 = 0.08 -> 0.09 (not below the one ranked before); 0.5*1
    assert analysis.holm([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert analysis.holm([0.6, 0.9]) == [1.0, 1.0]


def test_mcnemar_and_holm_of_realms_last_step_against_each_control(tmp_path):
    _synthetic_seed(tmp_path / "seed0")
    result = analysis.analyse([tmp_path / "seed0"])
    tests = {(t["endpoint"], t["control"]): t for t in result["seeds"][0]["tests"]}
    assert len(tests) == 6 and result["seeds"][0]["family_complete"]
    # exact two-sided McNemar by hand: 2 * sum_{i <= min} C(n, i) / 2^n
    expected = {("a", "warm"): 2 * (1 + 9) / 2**9, ("a", "closed_book"): 2 / 2**6, ("a", "frozen"): 1.0,
                ("b", "warm"): 2 / 2**10, ("b", "closed_book"): 1.0, ("b", "frozen"): 2 / 2**3}  # fmt: skip
    for key, p in expected.items():
        assert tests[key]["p"] == pytest.approx(p), key
    assert (tests[("a", "warm")]["only_realm"], tests[("a", "warm")]["only_control"]) == (8, 1)
    # Holm over the 6 tests of the seed: ranks 0.00195*6, 0.03125*5, 0.0390625*4 -> 0.15625, 0.25*3, 1, 1
    holm = {("b", "warm"): 6 * 2 / 2**10, ("a", "closed_book"): 5 / 32, ("a", "warm"): 5 / 32,
            ("b", "frozen"): 0.75, ("a", "frozen"): 1.0, ("b", "closed_book"): 1.0}  # fmt: skip
    for key, p in holm.items():
        assert tests[key]["p_holm"] == pytest.approx(p), key
    assert [k for k, t in tests.items() if t["significant"]] == [("b", "warm")]
    decision = {(d["endpoint"], d["control"]): d["realm_better_in_every_seed"] for d in result["decision"]}
    assert decision[("b", "warm")] and not decision[("a", "warm")]


def test_a_missing_row_leaves_the_family_incomplete_and_a_claim_needs_every_seed(tmp_path):
    _synthetic_seed(tmp_path / "seed0")
    _synthetic_seed(tmp_path / "seed1", with_frozen=False)
    result = analysis.analyse([tmp_path / "seed0", tmp_path / "seed1"])
    second = result["seeds"][1]
    assert not second["family_complete"]
    assert [t["p"] for t in second["tests"] if t["control"] == "frozen"] == [None, None]
    # Holm over the 4 tests found: b vs warm 4 * 2/1024
    assert next(t for t in second["tests"] if t["endpoint"] == "b" and t["control"] == "warm")["p_holm"] == (
        pytest.approx(8 / 1024))
    assert "incomplete" in analysis.format_analysis(result)
    rows = {(r["endpoint"], r["row"], r["step"]): r["retrieval"] for r in result["seeds"][0]["accuracy"]}
    assert rows[("a", "realm", 4)] == 0.5 and rows[("a", "realm", 2)] == 0.0 and ("a", "warm", 0) in rows


def test_items_that_differ_in_number_are_refused(tmp_path):
    _synthetic_seed(tmp_path / "seed0")
    _write(tmp_path / "seed0", "frozen", 4, {"a": [1] * 19, "b": _control(3, 0)})
    with pytest.raises(analysis.AnalysisError, match="a: realm has 20 items and frozen 19"):
        analysis.analyse([tmp_path / "seed0"])


def test_only_the_primary_endpoints_form_the_family_and_the_others_are_still_reported(tmp_path):
    _synthetic_seed(tmp_path / "seed0")
    (tmp_path / "seed0" / analysis.STAGE_FILE).write_text(json.dumps({"seed": 0, "eval_at": [0, 2, 4],
                                                                      "primary": ["b"]}))  # fmt: skip
    seed = analysis.analyse([tmp_path / "seed0"])["seeds"][0]
    assert [(t["endpoint"], t["control"]) for t in seed["tests"]] == [("b", "warm"), ("b", "closed_book"),
                                                                       ("b", "frozen")]  # fmt: skip
    # Holm over 3: 2/1024 * 3; 0.25 * 2; 1.0
    assert [t["p_holm"] for t in seed["tests"]] == pytest.approx([6 / 1024, 1.0, 0.5])
    assert {r["endpoint"] for r in seed["accuracy"]} == {"a", "b"}
