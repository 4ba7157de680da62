"""Every CPU benchmark runs end to end at a tiny shape and writes the figures its README row promises. No time is
asserted (speed is measured by running them, docs/performance.md); what is asserted is that they run at all: a change
to the library's interfaces once broke ``benchmarks.step`` and ``benchmarks.step_knobs`` (a block store stand-in of
theirs lacked ``ragged``; they now use ``BlockStore`` itself) and nothing noticed, the GPU check's step part
included."""

import json

import pytest

from tests.helpers import run_module

TINY = ["--hidden", "32", "--layers", "1", "--heads", "2", "--intermediate", "64", "--vocab", "300",
        "--peak-size", "128"]  # fmt: skip


@pytest.fixture
def out(tmp_path):
    return tmp_path / "figures.json"


def read(path):
    return json.loads(path.read_text())


def test_step_times_the_realm_step_its_parts_the_plain_bert_and_the_qa_step_in_both_precisions(out):
    # note: --prefetch as the GPU check runs it (experiments/full_scale/gpu_check_parts.py)
    run_module("benchmarks.step", *TINY, "--batch", "2", "--corpus", "50", "--steps", "1", "--warmup", "0",
               "--prefetch", "--json", str(out))  # fmt: skip
    figures = read(out)
    for precision in ("fp32", "bf16"):
        whole = figures["rows"][f"REALM step [{precision}]"]["ms"]
        parts = [figures["rows"][f"REALM step [{precision}] / {p}"]["ms"]
                 for p in ("search embed (no_grad)", "retrieve (search+packing)", "forward+backward", "clip+AdamW")]
        assert whole > 0 and all(p > 0 for p in parts) and sum(parts) <= whole * 1.05, figures["rows"]
        prefetched = figures["rows"][f"REALM step, prefetched [{precision}]"]["ms"]
        prefetched_model = figures["rows"][f"REALM step, prefetched [{precision}] / forward+backward"]["ms"]
        assert prefetched > 0 and prefetched_model > 0
        for row in ("BERT MLM, reader seqs", "BERT MLM, all seqs", "QA fine-tuning step"):
            assert figures["rows"][f"{row} [{precision}]"]["ms"] > 0
    assert set(figures["bf16_speedup"]) == {"REALM step", "REALM step, prefetched", "BERT MLM, reader seqs",
                                            "BERT MLM, all seqs", "QA fine-tuning step"}  # fmt: skip
    assert figures["seq_shapes"]["reader"][0] == 2 * 5  # B queries x K slots


def test_step_knobs_change_one_knob_at_a_time_and_size_the_refresh(out):
    run_module("benchmarks.step_knobs", *TINY, "--batch", "2", "--corpus", "50", "--steps", "1", "--warmup", "0",
               "--precisions", "fp32", "--knob-candidates", "3", "--block-lens", "32", "--query-lens", "8",
               "--builder-blocks", "20", "--corpus-blocks", "1000", "--intervals", "10",
               "--json", str(out))  # fmt: skip
    rows = read(out)["rows"]
    assert rows["base [fp32]"]["over_base"] == 1.0
    for knob in ("candidates=3", "block_len=32", "query_len=8"):
        row = rows[f"{knob} [fp32]"]
        assert row["step_s"] > 0 and row["over_base"] == pytest.approx(row["step_s"] / rows["base [fp32]"]["step_s"])
    assert {"builder block_len=32 [fp32]", "builder block_len=96 [fp32]"} <= set(rows)


def test_builder_compares_embed_blocks_with_a_bare_forward_and_projects_a_refresh(out):
    run_module("benchmarks.builder", *TINY, "--blocks", "64", "--embed-blocks", "32", "--batch", "16", "--rounds", "1",
               "--processes", "1", "--json", str(out))  # fmt: skip
    figures = read(out)
    embed = figures["embed"]
    assert embed["blocks"] == 32 and embed["embed_blocks_per_s"] > 0 and embed["bare_blocks_per_s"] > 0
    assert embed["embed_over_bare"] > 0
    assert set(figures["by_precision"]) == {"fp32", "bf16"}
    wiki = figures["wikipedia"]
    assert wiki["hours_8dev_ideal"] == pytest.approx(wiki["hours_1dev_ideal"] / 8)


def test_search_finds_the_same_ids_as_faiss_flat(out):
    run_module("benchmarks.search", "--rows", "2000", "--queries", "4", "--dim", "16", "--json", str(out))
    figures = read(out)
    assert figures["same_ids"] == 1.0 and figures["faiss_flat_ms"] > 0 and figures["torch_ms"] > 0
