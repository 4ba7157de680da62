"""The scale rehearsal's pieces (``experiments/full_scale/rehearsal*.py``): the generated DPR corpus as the project
reads it, the growth exponent, the 21M-passage projection's arithmetic, the builder-log phases and the markdown table;
and that the opt-in ``scale`` tests stay out of a default ``pytest`` run."""

from __future__ import annotations

import importlib
import json
import math
import subprocess
import sys

import pytest

from experiments.full_scale import rehearsal
from realm.data.corpus import CorpusConfig, check_unique_ids, read_documents
from realm.data.tagging import RuleTagger
from tests.helpers import ROOT

# note: imported by name, not through bench_module: a dataclass needs its module in sys.modules
corpus = importlib.import_module("experiments.full_scale.rehearsal_corpus")
fit = importlib.import_module("experiments.full_scale.rehearsal_fit")


def test_generated_corpus_is_dpr_tsv_the_reader_accepts_with_a_title_per_article(tmp_path):
    shape = corpus.CorpusShape(num_passages=50, passages_per_article=3, seed=1)
    path = corpus.write_corpus(tmp_path / "psgs.tsv", shape)
    assert path.read_text(encoding="utf-8").startswith("id\ttext\ttitle\n")
    cfg = CorpusConfig(path=str(path), format="dpr_tsv")
    docs = list(read_documents(cfg))
    check_unique_ids(cfg)  # raises on a repeated id
    assert len(docs) == 50 and [d.id for d in docs] == [str(i) for i in range(1, 51)]
    titles = [d.title for d in docs]
    # consecutive passages share their article's title, and no two articles share one
    assert titles[0] == titles[2] != titles[3] and len(set(titles)) == math.ceil(50 / 3)
    words = [len(d.text.split()) for d in docs]
    assert min(words) >= 60 and max(words) <= 90
    # what the rule tagger finds: a capitalised name in every passage
    assert all(any(label == "NAME" for *_, label in spans) for spans in RuleTagger().tag([d.text for d in docs]))


def test_generated_corpus_is_the_same_bytes_for_the_same_seed_and_differs_for_another(tmp_path):
    a = corpus.write_corpus(tmp_path / "a.tsv", corpus.CorpusShape(num_passages=20, seed=3))
    b = corpus.write_corpus(tmp_path / "b.tsv", corpus.CorpusShape(num_passages=20, seed=3))
    c = corpus.write_corpus(tmp_path / "c.tsv", corpus.CorpusShape(num_passages=20, seed=4))
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    assert not list(tmp_path.glob(".*.tmp"))  # written under a temporary name, then renamed


def test_growth_exponent_is_the_log_log_slope():
    sizes = [1e5, 3e5, 1e6]
    assert fit.growth_exponent(sizes, [2 * n for n in sizes]) == pytest.approx(1.0)
    assert fit.growth_exponent(sizes, [5 * n**0.5 for n in sizes]) == pytest.approx(0.5)
    assert fit.growth_exponent(sizes, [7.0, 7.0, 7.0]) == pytest.approx(0.0)
    assert fit.growth_exponent([1e5], [3.0]) is None
    assert fit.growth_exponent([1e5, 1e6], [0.0, 3.0]) is None


def test_projection_arithmetic_from_the_named_gpu_figures():
    p = fit.project(8, 1e-6, builder_gpus=1, num_passages=1_000_000)
    assert (p.builder_gpus, p.trainer_gpus, p.num_blocks) == (1, 7, 1_000_000)
    assert p.embed_s == pytest.approx(1_000_000 / fit.GPU_BUILDER_BLOCKS_PER_S)
    assert p.faiss_s == pytest.approx(1.0) and p.refresh_s == pytest.approx(p.embed_s + 1.0)
    compute = fit.GPU_STEP_S * (fit.GLOBAL_BATCH / 7) / fit.GPU_STEP_BATCH / fit.DATA_PARALLEL_EFFICIENCY
    search = 1_000_000 * fit.INDEX_DIM * fit.SEARCH_BYTES_PER_VALUE / fit.GPU_HBM_BYTES_PER_S
    assert p.step_s == pytest.approx(compute + search)
    # 160 s of refresh against 1500 steps of 1.3 s: the trainer never waits, so the days are the steps alone
    assert p.wait_per_refresh_s == 0.0 and p.effective_step_s == p.step_s
    assert p.days_per_100k_steps == pytest.approx(100_000 * p.step_s / 86_400)


def test_projection_charges_waits_when_a_refresh_outlasts_max_staleness():
    p = fit.project(64, 0.0)
    assert p.refresh_steps > fit.MAX_STALENESS
    assert p.wait_per_refresh_s == pytest.approx(p.refresh_s - fit.MAX_STALENESS * p.step_s)
    # each refresh's seconds buy MAX_STALENESS steps: the index, not the step, sets the pace
    assert p.effective_step_s == pytest.approx(p.refresh_s / fit.MAX_STALENESS) and p.effective_step_s > p.step_s
    assert p.days_per_100k_steps == pytest.approx(100_000 * p.effective_step_s / 86_400)
    # more builder GPUs: a shorter refresh and fewer days; more trainer GPUs: a shorter step
    faster = fit.project(64, 0.0, builder_gpus=8)
    assert faster.refresh_s < p.refresh_s and faster.days_per_100k_steps < p.days_per_100k_steps
    assert fit.project(64, 0.0).step_s < fit.project(8, 0.0).step_s
    with pytest.raises(ValueError, match="builder_gpus"):
        fit.project(8, 0.0, builder_gpus=8)


def test_builder_phases_split_a_build_log_into_embedding_and_faiss(tmp_path):
    log = tmp_path / "index.log"
    log.write_text(
        "23:59:50 [realm __main__] INFO building index for retriever step 0 (live index: -1)\n"
        "00:00:20 [realm realm.index.build_version] INFO index HNSW32: expected 0.5 GB on CPU RAM\n"
        "00:01:05 [realm __main__] INFO published v-00000000: 100000 blocks in 75.0 s\n"
    )
    assert rehearsal.builder_phases(log) == {"embed_s": 30, "faiss_s": 45}
    log.write_text("00:00:01 [realm __main__] INFO building index for retriever step 0\n")
    assert rehearsal.builder_phases(log) == {}


def test_markdown_table_has_a_row_per_stage_with_exponents_and_the_projection():
    run = {"wall_s": 2.0, "peak_rss_bytes": 1 << 30, "peak_anon_bytes": 1 << 29, "bound_bytes": 2 << 30}
    result = {
        "passages": [10, 20],
        "stages": {"tag": {"cost": "data", "shapes": "rule", "runs": {"10": run, "20": run | {"wall_s": 4.0}},
                           "wall_exponent": 1.0, "rss_exponent": 0.0, "anon_exponent": 0.5},
                   "ict": {"cost": "per-token", "shapes": "BERT-base", "runs": {}, "wall_exponent": None,
                           "rss_exponent": None, "not_run": "after tag failed"}},
        "projection": [fit.project(8, 0.0).to_dict()],
        "assumptions": fit.assumptions(),
    }  # fmt: skip
    table = fit.markdown(result)
    assert "| tag | data | rule | 2.0 | 4.0 | 1.00 | 1.00 / 0.50 | 1.00 / 0.50 | 0.00 | 0.50 | 2.00 |" in table
    assert "| ict (after tag failed) |" in table
    assert "| 8 (1 + 7) | Flat |" in table and "GPU_BUILDER_BLOCKS_PER_S = 6,245.0" in table


def test_scale_tests_are_skipped_by_the_default_command():
    cmd = [sys.executable, "-m", "pytest", "-q", "-o", "addopts=", "-p", "no:cacheprovider", "tests/scale"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 skipped" in out.stdout and "passed" not in out.stdout


def test_measure_reports_the_peak_of_the_whole_process_tree_and_fails_with_the_log(tmp_path):
    measure = importlib.import_module("experiments.full_scale.rehearsal_measure")
    # a parent holding 100 MB starts a child holding 200 MB; both sleep so the polls see them together
    child = "import time; b = bytearray(200 << 20); time.sleep(1.5)"
    parent = f"import subprocess, sys; b = bytearray(100 << 20); subprocess.run([sys.executable, '-c', {child!r}])"
    got = measure.measure([sys.executable, "-c", parent], tmp_path / "ok.log")
    assert got.max_processes == 2 and got.peak_anon_bytes >= 290 << 20 and got.peak_rss_bytes >= got.peak_anon_bytes
    assert got.wall_s >= 1.5
    with pytest.raises(measure.StageFailed, match="exit code 3") as err:
        measure.measure([sys.executable, "-c", "print('what went wrong'); raise SystemExit(3)"], tmp_path / "bad.log")
    assert "what went wrong" in str(err.value)


def test_ivf_list_count_keeps_39_training_points_a_list_up_to_the_config_4096():
    stages = importlib.import_module("experiments.full_scale.rehearsal_stages")
    assert stages.ivf_factory(10_000) == "IVF256,PQ32"  # 10,000 / 39 = 256.4
    assert stages.ivf_factory(100_000) == "IVF2048,PQ32"
    assert stages.ivf_factory(1_000_000) == "IVF4096,PQ32"


def test_memory_bounds_grow_with_n_only_through_the_index(tmp_path):
    stages = importlib.import_module("experiments.full_scale.rehearsal_stages")

    def bounds(n):
        ctx = stages.Context(out=tmp_path, num_passages=n, tokenizer="unused")
        return {stage.name: stage.bound_bytes(ctx) for stage in stages.STAGES}

    mid, large = bounds(300_000), bounds(1_000_000)  # both past the warm-up's sample and BlockStore's list limit
    indexed = {"train", "index_ivfpq", "index_hnsw", "search_flat", "search_ivfpq", "search_hnsw"}
    assert {name for name in mid if mid[name] != large[name]} == indexed
    flat_growth = 700_000 * stages.BLOCKS_PER_PASSAGE * stages.EMBED_DIM * 4
    assert large["search_flat"] - mid["search_flat"] == pytest.approx(flat_growth, rel=0.01)
    # under BlockStore's in_memory_limit (200k blocks) the bounds carry its block lists; above it they do not
    lists = [stages._block_lists_bytes(stages.Context(out=tmp_path, num_passages=n, tokenizer="")) for n in (1e5, 1e6)]
    assert lists == [int(100_000 * stages.BLOCKS_PER_PASSAGE) * stages.BLOCK_LIST_BYTES_PER_BLOCK, 0]


def _single_size(n, wall, failed=None):
    """A rehearsal JSON of one size, as ``main`` writes it: ``data`` ran (``wall`` seconds), ``tag`` ran or failed."""
    run = {"wall_s": wall, "peak_rss_bytes": 1 << 30, "peak_anon_bytes": 1 << 29, "bound_bytes": 2 << 30}
    tag = {"failed": failed} if failed else dict(run)
    return rehearsal.summarise([n], {n: {"data": run, "tag": tag}}, ["data", "tag"])


def test_table_merges_runs_of_other_sizes_and_fits_exponents_over_all_of_them(tmp_path, capsys):
    small, large = _single_size(100_000, 10.0), _single_size(1_000_000, 100.0, failed="tag: killed")
    merged = rehearsal.merge([large, small])
    assert merged["passages"] == [100_000, 1_000_000]
    assert merged["stages"]["data"]["wall_exponent"] == pytest.approx(1.0)  # ×10 the wall for ×10 the passages
    assert merged["stages"]["data"]["runs"].keys() == {"100000", "1000000"}
    # the failure at 1M stays named; the 100k run is kept
    assert merged["stages"]["tag"]["runs"].keys() == {"100000"} and merged["stages"]["tag"]["not_run"] == "tag: killed"
    # stages of one size run again: the later run is kept, the failure it fixes is gone, and the earlier run is named
    rerun = rehearsal.summarise([1_000_000], {1_000_000: {"tag": dict(small["stages"]["data"]["runs"]["100000"])}},
                                ["tag"])  # fmt: skip
    again = rehearsal.merge([small, large, rerun])
    assert again["stages"]["tag"]["runs"].keys() == {"100000", "1000000"} and "not_run" not in again["stages"]["tag"]
    assert again["stages"]["data"]["runs"]["1000000"]["wall_s"] == 100.0  # not run again: the first run stays
    assert rehearsal.merge([again, _single_size(1_000_000, 80.0)])["stages"]["data"]["runs"]["1000000"]["wall_s"] == 80
    assert "data @1,000,000: the run of JSON 2 (80.0 s) replaces an earlier one (100.0 s)" in capsys.readouterr().err
    # the CLI: several JSONs in, one merged JSON and table out
    paths = [tmp_path / "r100k.json", tmp_path / "r1m.json"]
    for path, result in zip(paths, (small, large)):
        path.write_text(json.dumps(result), encoding="utf-8")
    rehearsal.main(["--table", *map(str, paths), "--json", str(tmp_path / "both.json")])
    assert "| data | " in capsys.readouterr().out
    assert json.loads((tmp_path / "both.json").read_text(encoding="utf-8"))["passages"] == [100_000, 1_000_000]
