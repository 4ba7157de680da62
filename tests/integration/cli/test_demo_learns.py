"""The demo recipe must *learn*, checked at a CI size: every stage of ``realm demo`` (reader warm-up, ICT,
pre-training with the child builder and reproducible swaps, QA) on a 300-entity world, so that a recipe regression
turns CI red instead of only the figures in experiments/demo/log/2026-11-25-evidence.md.

What is asserted is what the demo claims, with margins measured on this exact command
(experiments/demo/log/2026-11-25-evidence.md, "Reproducible runs"; the run is deterministic, so the margins cover only
other CPUs' rounding): held-out facts are read from the retrieved article far above closed book and above the starting
model; the learning curve is logged; and QA, fine-tuned on questions about training entities, answers questions about
*held-out* entities it never trained on.
"""

import json

import pytest

from realm.core.logging import read_metrics
from realm.data.jsonl import iter_jsonl
from tests.helpers import run_module

pytestmark = pytest.mark.slow

COMMAND = [
    "--num_entities=300", "--warm_start.warmup_steps=800", "--warm_start.ict_steps=100", "--pretrain_steps=200",
    "--refresh.refresh_interval=50", "--refresh.swap_lag=20", "--optim.retriever_delay_steps=67",
    "--optim.retriever_warmup_steps=33", "--train.eval_interval=50", "--eval.interval_examples=100", "--qa_steps=40",
    "--max_dev_questions=0",
]  # fmt: skip
"""The demo recipe at a third of its pre-training (the retriever's delay and warm-up scaled with it) on a 300-entity
world (165 held-out sentences and questions). Measured with it before centred searches (2 cores): held-out 0.236 ->
0.564 (closed book 0.006), gold recall@4 0.952 -> 1.000, QA exact match 0.042 -> 0.588 (the retriever held still for
its first 67 steps, docs/recipe.md point 6; before it, held-out 0.515 and recall@4 0.982 -> 0.976); about 5 minutes
alone on the slower 2-core machine. Today's figures: ``THREADS``."""
MIN_HELD_OUT, MIN_GAIN, MIN_RECALL, MIN_QA = 0.40, 0.15, 0.85, 0.40
"""Each well below the measured figure, each far above what a run that does not learn gives (the start's 0.22 held
out; QA's 0.06 before fine-tuning; a recall below 0.85 is a retriever pre-training broke)."""
RECALL_SLACK = 3 / 165
"""Recall may end three sentences below a near-perfect start (0.952-0.988 at this size) without the test calling it
broken: the retriever is learning from the reader's signal, and a start this high leaves it nothing to gain."""


def read_jsonl(path):
    return (record for _, record in iter_jsonl(path))


THREADS = (2, 1)
"""Each thread count reduces in another order, so the two runs round differently from the first step on and end
elsewhere (issue 56: a recipe that learns on one rounding only must turn CI red). Measured with today's recipe (centred
searches), seed 0, fp32, on the AVX2-only 2-core machine: 2 threads held-out 0.515 (closed book 0.000), recall@4 0.964
-> 0.988, QA 0.042 -> 0.582, 683 s; 1 thread 0.539 (0.006), 0.988 -> 0.976, 0.036 -> 0.594, 801 s (both beside a
1-thread demo pair). Before centring, the 2-thread run lost four sentences of recall (0.988 -> 0.964) and was an
expected failure (experiments/demo/log/2026-11-29-screen4-check.md, "The default changes")."""


@pytest.mark.parametrize("threads", THREADS)
def test_the_demo_recipe_learns_at_ci_size(tmp_path, threads):
    run = tmp_path / "demo"
    # note: the timeout only catches a hang (about 5 minutes alone on the slow 2-core machine; twice that beside
    # another job); how fast it runs is not what this test checks
    run_module("realm.cli.demo", "--out", str(run), *COMMAND, f"--num_threads={threads}", timeout=1800)
    summary = json.loads((run / "summary.json").read_text())
    records = read_metrics(run / "metrics.jsonl")
    start = next(r for r in records if r["step"] == 0 and "eval_exact/span_accuracy" in r)
    held_out, closed_book = summary["heldout_accuracy_retrieval"], summary["heldout_accuracy_closed_book"]
    assert held_out >= MIN_HELD_OUT and held_out >= 10 * max(closed_book, 0.01), summary
    assert held_out >= start["eval_exact/span_accuracy"] + MIN_GAIN, (start, summary)
    assert summary["gold_recall_at_k_end"] >= MIN_RECALL, summary
    assert summary["gold_recall_at_k_end"] >= summary["gold_recall_at_k_start"] - RECALL_SLACK, summary
    curve = [r["step"] for r in records if "eval/span_accuracy" in r]
    assert curve == list(range(0, 201, 50))  # the learning curve: every eval_interval steps from step 0
    # QA on questions about held-out entities, none of which it fine-tuned on
    entities = [{r["entity_id"] for r in read_jsonl(run / "world" / f"questions_{split}.jsonl")}
                for split in ("train", "heldout")]  # fmt: skip
    assert entities[0] and entities[1] and not entities[0] & entities[1]
    assert summary["qa_num_questions"] == sum(1 for _ in read_jsonl(run / "world" / "questions_heldout.jsonl"))
    assert summary["qa_exact_match_end"] >= MIN_QA and summary["qa_exact_match_end"] > summary["qa_exact_match_start"]
