"""``experiments/real_text/real_open_qa.py`` runs every stage at its own config's length, where ``realm real-text``'s
default cuts them to fit 30 minutes on 2 cores: the bench's figures and the default's cost are of different runs, each
named."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from experiments.real_text import real_open_qa
from realm.core.config import load_config, read_yaml
from realm.data.cloze_sets import ClozeSets
from realm.pipeline.real_text import RealTextConfig, pretrain_config
from realm.pretrain.config import PretrainConfig
from tests.helpers import ROOT


def _config_steps(path: str) -> int:
    return read_yaml(ROOT / path)["train"]["max_steps"]


def test_the_default_cuts_every_trained_stage_and_the_bench_restores_each_configs_own_length(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    default = load_config(RealTextConfig, ROOT / "configs/real_text/default.yaml")
    lengths = {"warmup": default.warm_start.warmup_steps, "ict": default.warm_start.ict_steps,
               "pretrain": default.pretrain_steps, "finetune": default.qa_steps}  # fmt: skip
    full = {"warmup": _config_steps(default.warm_start.warmup_config),
            "ict": _config_steps(default.warm_start.ict_config),
            "pretrain": _config_steps(default.pretrain_config), "finetune": _config_steps(default.finetune_config)}
    assert all(0 < lengths[stage] < full[stage] for stage in full), (lengths, full)

    bench = real_open_qa.pipeline_config("scratch", 1, tmp_path, [])
    assert (bench.warm_start.warmup_steps, bench.warm_start.ict_steps, bench.pretrain_steps, bench.qa_steps) == (
        None, None, None, None)  # None: the stage config's own max_steps
    assert bench.warm_start.copy_curriculum == default.warm_start.copy_curriculum and bench.seed == 1
    assert bench.out == str(tmp_path / "scratch" / "seed1")
    # an explicit --set still wins over the full lengths, and a --set in the same section keeps them
    assert real_open_qa.pipeline_config("scratch", 0, tmp_path, ["--pretrain_steps=7"]).pretrain_steps == 7
    mixed = real_open_qa.pipeline_config("scratch", 0, tmp_path, ["--warm_start.ict_steps=9"]).warm_start
    assert (mixed.warmup_steps, mixed.ict_steps) == (None, 9)


def test_gpu_takes_the_gpu_configs_pretraining_overrides_for_every_init_and_nothing_else(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    plain = real_open_qa.pipeline_config("scratch", 0, tmp_path, [])
    gpu = real_open_qa.pipeline_config("scratch", 0, tmp_path, [], gpu=True)
    assert not plain.pretrain_overrides
    assert gpu.pretrain_overrides == read_yaml(ROOT / "configs/real_text/gpu.yaml")["pretrain_overrides"]
    assert gpu.pretrain_overrides["refresh"]["builder_devices"] == "0"
    assert dataclasses.replace(gpu, pretrain_overrides=plain.pretrain_overrides) == plain


def test_a_users_pretraining_overrides_beside_gpu_are_merged_key_by_key_and_win(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    gpu_config = read_yaml(ROOT / "configs/real_text/gpu.yaml")["pretrain_overrides"]
    extra = ["--pretrain_overrides.refresh.builder_devices=1", "--pretrain_overrides.train.log_every=3"]
    both = real_open_qa.pipeline_config("scratch", 0, tmp_path, extra, gpu=True).pretrain_overrides
    assert both["refresh"]["builder_devices"] == 1 and both["train"]["log_every"] == 3  # the user's values win
    others = {k: v for k, v in gpu_config["refresh"].items() if k != "builder_devices"}
    assert {k: both["refresh"][k] for k in others} == others  # and the GPU config's other keys stay
    assert both["train"]["prefetch_candidates"] is True


def _folder_config(tmp_path) -> RealTextConfig:
    """The MiniLM pipeline's config with a stand-in folder: what it names, not its weights, is under test."""
    overrides = {"out": str(tmp_path / "run"), "init_from": str(tmp_path / "bert")}
    return load_config(RealTextConfig, ROOT / "configs/real_text/minilm.yaml", overrides)


def test_through_runs_the_pipeline_only_as_far_as_the_last_retriever_needs(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    scratch, folder = real_open_qa.pipeline_config("scratch", 0, tmp_path, []), _folder_config(tmp_path)
    # an init folder's start is the folder itself: its blocks suffice; the scratch start is the warmed-up encoder
    assert [real_open_qa.stop_after(folder, t) for t in real_open_qa.DENSE] == ["data", "warm_start", "pretrain"]
    stages = [real_open_qa.stop_after(scratch, t) for t in real_open_qa.DENSE]
    assert stages == ["warm_start", "warm_start", "pretrain"]
    out = Path(scratch.out)
    assert not real_open_qa.done(scratch, {}, "data")
    assert real_open_qa.done(scratch, {"num_blocks": 3}, "data")
    assert not real_open_qa.done(scratch, {"num_blocks": 3}, "warm_start")
    (out / "ict" / "retriever").mkdir(parents=True)
    assert real_open_qa.done(scratch, {"num_blocks": 3}, "warm_start")
    assert not real_open_qa.done(scratch, {"num_blocks": 3}, "pretrain")
    assert real_open_qa.done(scratch, {"heldout_accuracy_retrieval": 0.1}, "pretrain")


def test_before_pretraining_the_start_is_shaped_as_the_pipeline_would_pretrain_it(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    cfg = _folder_config(tmp_path)
    pretrain, bert = real_open_qa.retriever_shape(cfg)
    data = {"tokenizer": cfg.init_from, "blocks": str(tmp_path / "run" / "blocks")}
    sets = ClozeSets(tmp_path / "x.jsonl", tmp_path / "h.jsonl", 0, 0, 0, 0)
    written = pretrain_config(cfg, data, sets, warmed=True)
    assert pretrain.retriever == written.retriever and bert == cfg.init_from
    assert (pretrain.retriever.pooling, pretrain.retriever.init_projection) == ("model", "identity")
    assert (pretrain.data.tokenizer, pretrain.data.blocks) == (data["tokenizer"], data["blocks"])


def test_qa_rows_past_through_are_refused_before_anything_runs(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        real_open_qa.main(["--work", str(tmp_path), "--through", "start", "--qa-rows", "start", "bm25"])
    assert exit_info.value.code == 2 and "--qa-rows bm25" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def _em(value: float, correct: list[int]) -> dict:
    """An ``exact_match`` cell."""
    return {"em": value, "em_answerable": value, "correct_answerable": correct}


def test_a_qa_row_is_fine_tuned_once_and_read_back_by_exact_match_each_time(tmp_path, monkeypatch):
    calls = []

    def fine_tune(cfg):  # publishes the row's model, as realm finetune does at its end
        calls.append("finetune")
        (tmp_path / "qa_ict" / "model").mkdir(parents=True)
        (tmp_path / "qa_ict" / "model" / "manifest.json").write_text("{}")

    def exact_match(qa_dir, sets):
        calls.append(("exact_match", qa_dir.name))
        return {name: _em(0.0, [0]) for name in sets}

    pretrain = load_config(PretrainConfig, overrides={})
    monkeypatch.setattr(real_open_qa, "retriever_shape", lambda cfg: (pretrain, "bert"))
    monkeypatch.setattr(real_open_qa, "finetune_and_evaluate", fine_tune)
    monkeypatch.setattr(real_open_qa, "exact_match", exact_match)
    cfg = dataclasses.replace(load_config(RealTextConfig, ROOT / "configs/real_text/default.yaml"), out=str(tmp_path))
    sets = {"nq": ([], [])}
    real_open_qa.qa_rows(cfg, sets, ["ict"])
    row = {"em": 0.0, "em_answerable": 0.0, "replicas": [[0]]}
    assert real_open_qa.qa_rows(cfg, sets, ["ict"]) == {"ict": {"nq": row}}
    assert calls == ["finetune", ("exact_match", "qa_ict"), ("exact_match", "qa_ict")]


def test_a_set_with_its_own_training_file_is_read_by_the_same_start_fine_tuned_on_it(tmp_path, monkeypatch):
    tuned, read = [], []

    def fine_tune(cfg):  # publishes the row's model, as realm finetune does at its end
        tuned.append(cfg)
        (Path(cfg.train.run_dir) / "model").mkdir(parents=True)
        (Path(cfg.train.run_dir) / "model" / "manifest.json").write_text("{}")

    def exact_match(qa_dir, sets):
        read.append((qa_dir.name, sorted(sets)))
        return {name: _em(float(len(qa_dir.name)), []) for name in sets}

    monkeypatch.setattr(real_open_qa, "retriever_shape", lambda cfg: (load_config(PretrainConfig), "bert"))
    monkeypatch.setattr(real_open_qa, "finetune_and_evaluate", fine_tune)
    monkeypatch.setattr(real_open_qa, "exact_match", exact_match)
    monkeypatch.setattr(real_open_qa.live_index, "current_index_version", lambda d: d / "index" / "v-00000000")
    cfg = dataclasses.replace(load_config(RealTextConfig, ROOT / "configs/real_text/default.yaml"), out=str(tmp_path))
    sets = {"nq": ([], []), "wq": ([], []), "ct": ([], [])}
    rows = real_open_qa.qa_rows(cfg, sets, ["ict"], {"wq": "wq_train.json"})
    assert {s: row["em"] for s, row in rows["ict"].items()} == {"nq": 6.0, "ct": 6.0, "wq": 14.0}  # qa_ict_wqtrain
    assert read == [("qa_ict", ["ct", "nq"]), ("qa_ict_wqtrain", ["wq"])]
    nq, wq = tuned
    assert (nq.task.name, wq.task.name, wq.task.train, wq.task.dev) == (cfg.qa.train_task, "wq", "wq_train.json", "")
    assert wq.task.skip_malformed and not nq.task.skip_malformed
    # the same start (encoder, ICT retriever) and the NQ row's frozen index, not a new one
    ict_start = ("bert", str(tmp_path / "ict" / "retriever"))
    assert (nq.init.bert, nq.init.retriever) == (wq.init.bert, wq.init.retriever) == ict_start
    assert (nq.init.index, wq.init.index) == ("", str(tmp_path / "qa_ict" / "index" / "v-00000000"))
    real_open_qa.qa_rows(cfg, sets, ["ict"], {"wq": "wq_train.json"})
    assert len(tuned) == 2  # both published: read back, not fine-tuned again


def test_each_fine_tuning_seed_starts_as_the_first_over_its_frozen_index_with_only_its_seed(tmp_path, monkeypatch):
    tuned = []
    answers = {"qa_ict": [1, 0], "qa_ict_ft1": [1, 1], "qa_ict_ft2": [0, 0]}

    def fine_tune(cfg):  # publishes the row's model, as realm finetune does at its end
        tuned.append(cfg)
        (Path(cfg.train.run_dir) / "model").mkdir(parents=True)
        (Path(cfg.train.run_dir) / "model" / "manifest.json").write_text("{}")

    def exact_match(qa_dir, sets):
        correct = answers.get(qa_dir.name, [1, 1])
        return {name: _em(sum(correct) / 2, correct) for name in sets}

    monkeypatch.setattr(real_open_qa, "retriever_shape", lambda cfg: (load_config(PretrainConfig), "bert"))
    monkeypatch.setattr(real_open_qa, "finetune_and_evaluate", fine_tune)
    monkeypatch.setattr(real_open_qa, "exact_match", exact_match)
    monkeypatch.setattr(real_open_qa.live_index, "current_index_version", lambda d: d / "index" / "v-00000000")
    cfg = load_config(RealTextConfig, ROOT / "configs/real_text/default.yaml")
    cfg = dataclasses.replace(cfg, out=str(tmp_path), seed=3)
    sets = {"nq": ([], []), "wq": ([], [])}
    rows = real_open_qa.qa_rows(cfg, sets, ["ict"], {"wq": "wq_train.json"}, finetune_seeds=3)
    folders = [Path(c.train.run_dir).name for c in tuned]
    assert folders == ["qa_ict", "qa_ict_ft1", "qa_ict_ft2", *(f"qa_ict_wqtrain{r}" for r in ("", "_ft1", "_ft2"))]
    assert [c.train.seed for c in tuned] == [3, 103, 203] * 2
    frozen = str(tmp_path / "qa_ict" / "index" / "v-00000000")
    assert [c.init.index for c in tuned] == ["", *[frozen] * 5]  # the NQ row's own index, never a new one

    def but_seed(c):  # a config with what may differ between fine-tuning seeds blanked
        return dataclasses.replace(c, train=dataclasses.replace(c.train, run_dir="x", seed=0),
                                   init=dataclasses.replace(c.init, index=""))  # fmt: skip

    assert but_seed(tuned[0]) == but_seed(tuned[1]) == but_seed(tuned[2])
    assert but_seed(tuned[3]) == but_seed(tuned[4]) == but_seed(tuned[5]) != but_seed(tuned[0])
    assert rows["ict"]["nq"] == {"em": 0.5, "em_answerable": 0.5, "replicas": [[1, 0], [1, 1], [0, 0]]}
    assert rows["ict"]["wq"]["replicas"] == [[1, 1]] * 3
    real_open_qa.qa_rows(cfg, sets, ["ict"], {"wq": "wq_train.json"}, finetune_seeds=3)
    assert len(tuned) == 6  # all published: read back, not fine-tuned again


def test_a_row_without_a_published_index_stops_its_own_set_fine_tuning_with_the_folder_named(tmp_path, monkeypatch):
    tuned = []
    monkeypatch.setattr(real_open_qa, "retriever_shape", lambda cfg: (load_config(PretrainConfig), "bert"))
    monkeypatch.setattr(real_open_qa, "finetune_and_evaluate", tuned.append)  # publishes nothing, so no index either
    monkeypatch.setattr(real_open_qa, "exact_match", lambda qa_dir, sets: {})
    cfg = dataclasses.replace(load_config(RealTextConfig, ROOT / "configs/real_text/default.yaml"), out=str(tmp_path))
    message = re.escape(f"{tmp_path / 'qa_ict' / 'index'}: no published index")  # a path, not a pattern
    with pytest.raises(real_open_qa.BenchError, match=message):
        real_open_qa.qa_rows(cfg, {"nq": ([], []), "wq": ([], [])}, ["ict"], {"wq": "wq_train.json"})
    assert [Path(c.train.run_dir).name for c in tuned] == ["qa_ict"]  # the set's own fine-tuning never started
    # nor does a second fine-tuning seed start without the first's index
    with pytest.raises(real_open_qa.BenchError, match=message):
        real_open_qa.qa_rows(cfg, {"nq": ([], [])}, ["ict"], finetune_seeds=2)
    assert [Path(c.train.run_dir).name for c in tuned] == ["qa_ict"] * 2


def test_finetune_seeds_are_at_least_one(tmp_path, capsys):
    with pytest.raises(SystemExit):
        real_open_qa.main(["--work", str(tmp_path), "--finetune-seeds", "0"])
    assert "--finetune-seeds 0: at least 1" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_with_several_fine_tuning_seeds_the_bench_prints_their_mean_and_their_spread(tmp_path, monkeypatch, capsys):
    qa = {n: {"nq": {"em": 0.5, "em_answerable": 0.5, "replicas": [[1, 0], c]}} for n, c in
          (("ict", [0, 0]), ("realm", [1, 1]))}  # fmt: skip
    run = {"cloze": {}, "retrieval": {}, "qa": qa, "answerable": {"nq": 2}}

    def measure(args, names, own_train):
        assert args.finetune_seeds == 2
        return {"runs": {("minilm", 0): run}}, {}

    monkeypatch.setattr(real_open_qa, "measure", measure)
    assert real_open_qa.main(["--work", str(tmp_path), "--finetune-seeds", "2"]) == 0
    out = capsys.readouterr().out
    assert "the mean of each QA row's 2 fine-tuning seeds (train.seed = seed + 100 r)" in out
    assert "minilm s0: nq realm, 2 fine-tuning seeds: 1, 2 of 2 answerable questions right" in out
    assert "minilm s0: nq realm - ict over fine-tuning seeds: +1.0 ± 0.7 questions" in out


def test_train_sets_name_an_evaluation_set_other_than_nq_and_an_existing_file(tmp_path, capsys):
    for item in ("nq=" + __file__, "wq=" + str(tmp_path / "missing.json"), "squad=" + __file__):
        with pytest.raises(SystemExit):
            real_open_qa.main(["--work", str(tmp_path), "--train-sets", item])
        assert f"--train-sets {item}" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_exact_match_evaluates_only_the_sets_whose_predictions_are_not_saved_for_those_questions(tmp_path, monkeypatch):
    evaluated = []

    def evaluate_qa(model, questions, ctx, batch_size):  # right on every question whose text ends in "!"
        evaluated.append([q.question for q in questions])
        records = [{"question": q.question, "correct": q.question.endswith("!"), "span_in_read_blocks": True}
                   for q in questions]  # fmt: skip
        return {"exact_match": 0.0}, records

    context = SimpleNamespace(question_set=lambda questions, beam: questions)
    monkeypatch.setattr(real_open_qa, "load_qa_run", lambda qa_dir: ("model", context, {"step": 7}))
    monkeypatch.setattr(real_open_qa, "evaluate_qa", evaluate_qa)

    def question_set(*texts: str) -> tuple:
        return [SimpleNamespace(question=t) for t in texts], [not t.startswith("x") for t in texts]

    nq, wq = question_set("a!", "b", "xc!", "d!"), question_set("e", "f!")
    first = real_open_qa.exact_match(tmp_path, {"nq": nq, "wq": wq})
    assert evaluated == [["a!", "b", "xc!", "d!"], ["e", "f!"]]
    assert (tmp_path / "eval" / "nq_4" / "predictions.jsonl").is_file()  # where realm evaluate --name nq_4 writes
    assert first["nq"] == {"em": 0.75, "em_answerable": pytest.approx(2 / 3), "correct_answerable": [1, 0, 1]}
    assert first["wq"] == {"em": 0.5, "em_answerable": 0.5, "correct_answerable": [0, 1]}
    assert real_open_qa.exact_match(tmp_path, {"nq": nq, "wq": wq}) == first
    assert len(evaluated) == 2  # read back, not evaluated again
    fewer = (nq[0][:2], nq[1][:2])
    assert real_open_qa.exact_match(tmp_path, {"nq": fewer, "wq": wq})["nq"]["em"] == 0.5
    assert evaluated[2:] == [["a!", "b"]]
    # a saved file of other questions (another question file of the same length) is not taken for these
    other = question_set("g", "h", "i", "j!")
    assert real_open_qa.exact_match(tmp_path, {"nq": other})["nq"]["em"] == 0.25
    assert evaluated[3:] == [["g", "h", "i", "j!"]]


def test_a_malformed_predictions_file_stops_the_bench_with_its_file_and_line_and_is_kept(tmp_path, monkeypatch,
                                                                                         capsys):
    saved = tmp_path / "qa_ict" / "eval" / "nq_1" / "predictions.jsonl"
    saved.parent.mkdir(parents=True)
    saved.write_text("not json\n")

    def measure(args, names, own_train):  # reads the saved predictions back, as a second bench run does
        real_open_qa.exact_match(tmp_path / "qa_ict", {"nq": ([SimpleNamespace(question="q")], [True])})

    monkeypatch.setattr(real_open_qa, "measure", measure)
    assert real_open_qa.main(["--work", str(tmp_path), "--qa-rows", "ict"]) == 2
    assert f"{saved}:1: not a realm evaluate record" in capsys.readouterr().err
    assert saved.read_text() == "not json\n"
