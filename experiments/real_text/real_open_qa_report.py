"""The table ``experiments/real_text/real_open_qa.py`` prints: its columns (the evaluation sets), its rows (retrievers
and QA rows), the paired differences between rows over seeds, and how far a QA row's fine-tuning seeds lie apart.

A QA row's exact match on a set is the mean over its fine-tuning seeds (``--finetune-seeds``); ``replicas`` keeps
each one's 0/1 per answerable question, so the paired test can pair fine-tuning seed r of one row with seed r of the
other, and the spread between a row's own seeds says how much of a difference between rows one fine-tuning's noise
could make.
"""

from __future__ import annotations

import math
from collections import defaultdict

from benchmarks.harness import REPO  # noqa: E402 isort:skip  (first: no hub, no W&B)

from experiments.common.stats import disagreements, mcnemar_p, mean_and_error, permutation_p  # noqa: E402
from experiments.common.retrieval_accuracy import KS  # noqa: E402

SHARED = REPO.parent / "shared" / "data" / "real"
EVAL_SETS = {
    "nq": ("nq", SHARED / "nq_open" / "NQ-open.dev.jsonl"),
    "tqa": ("dpr", SHARED / "dpr_qas" / "topics.dpr.trivia.test.txt"),
    "wq": ("wq", SHARED / "webquestions" / "WebQuestions-test.txt"),
    "ct": ("ct", SHARED / "curatedtrec" / "CuratedTrec-test.txt"),
}
"""The table's columns: each set's ``--task.name`` and test file."""
DENSE = ("start", "ict", "realm")
QA_ROWS = ("bm25", *DENSE, "warm")
RETRIEVER_OF = {"warm": "ict"}
"""QA rows whose retriever is another row's: ``warm`` reads with the reader warm-up's encoder from ICT's retriever."""
PAIRS = (("realm", "ict"), ("realm", "warm"))
"""The paired differences: REALM over ORQA's start, and over the same start with the warmed-up reader (what the
REALM pre-training steps alone add)."""


def mean_of_replicas(ems: list[dict]) -> dict[str, dict]:
    """One QA row's ``{set: {em, em_answerable, replicas}}`` from its fine-tuning seeds' ``exact_match`` results
    (``{set: {em, em_answerable, correct_answerable}}`` each): the first two averaged, ``replicas`` each seed's 0/1
    list in seed order."""
    return {s: {"em": sum(e[s]["em"] for e in ems) / len(ems),
                "em_answerable": sum(e[s]["em_answerable"] for e in ems) / len(ems),
                "replicas": [e[s]["correct_answerable"] for e in ems]} for s in ems[0]}  # fmt: skip


def format_table(result: dict) -> str:
    """One line per (init, retriever): held-out cloze, then per set top-1/5/20 (answerable) and EM (answerable)."""
    head = "| init | retriever | held-out retrieval / closed book |"
    head += "".join(f" {s} top-1/5/20 (answerable) | {s} EM (answerable) |" for s in EVAL_SETS)
    lines = [head, "|" + "---|" * (3 + 2 * len(EVAL_SETS))]
    for (init, seed), run in sorted(result["runs"].items()):
        for name in (name for name in QA_ROWS if RETRIEVER_OF.get(name, name) in run["retrieval"]
                     and (name not in RETRIEVER_OF or name in run.get("qa", {}))):  # fmt: skip
            cloze = run["cloze"].get(name)
            cells = [init + f" s{seed}", name, f"{cloze[0]:.3f} / {cloze[1]:.3f}" if cloze else ""]
            for s in EVAL_SETS:
                acc = run["retrieval"][RETRIEVER_OF.get(name, name)][s]
                cells.append(" / ".join(f"{acc[f'top_{k}']:.3f}" for k in KS) + " (" +
                             " / ".join(f"{acc[f'top_{k}_answerable']:.3f}" for k in KS) + ")")  # fmt: skip
                em = run.get("qa", {}).get(name, {}).get(s)
                cells.append(f"{em['em']:.3f} ({em['em_answerable']:.3f})" if em else "")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _qa(run: dict, name: str, set_name: str) -> dict:
    return run.get("qa", {}).get(name, {}).get(set_name, {})


def _runs_of(result: dict) -> dict[str, dict[int, dict]]:
    """``{init: {seed: run}}``, inits sorted."""
    return {i: {seed: run for (j, seed), run in result["runs"].items() if j == i}
            for i in sorted({i for i, _ in result["runs"]})}  # fmt: skip


def paired(result: dict) -> str:
    """Each of ``PAIRS`` (later - earlier) over seeds, per init and set: mean and standard error of top-20 and EM over
    answerable questions (each seed's EM the mean of its fine-tuning seeds); then, per seed, set and fine-tuning seed,
    the questions only one of the two QA rows gets right, with the exact McNemar p. A pair is left out where a run
    lacks either row."""
    def top20(run: dict, name: str, set_name: str) -> float | None:
        return run["retrieval"].get(name, {}).get(set_name, {}).get("top_20_answerable")

    columns = (("top-20 answerable", top20), ("EM answerable", lambda r, n, s: _qa(r, n, s).get("em_answerable")))
    lines = []
    for init, runs in _runs_of(result).items():
        for later, earlier in PAIRS:
            for (label, get), set_name in ((column, s) for column in columns for s in EVAL_SETS):
                if label.startswith("top-20") and {earlier, later} & set(RETRIEVER_OF):
                    continue  # note: a row with another row's retriever has no top-20 of its own
                values = [(get(r, later, set_name), get(r, earlier, set_name)) for r in runs.values()]
                diffs = [b - a for b, a in values if a is not None and b is not None]
                if diffs:
                    mean, err = mean_and_error(diffs)
                    spread = f" ± {err:.3f}" if len(diffs) > 1 else ""  # note: one seed has no standard error
                    lines.append(f"{init}: {later} - {earlier}, {set_name} {label}: {mean:+.3f}{spread} over "
                                 f"{len(diffs)} seed(s), positive in {sum(d > 0 for d in diffs)}")  # fmt: skip
            for seed, set_name in ((seed, s) for seed in sorted(runs) for s in EVAL_SETS):
                rows = [_qa(runs[seed], n, set_name).get("replicas") for n in (earlier, later)]
                if None in rows:
                    continue
                # note: both rows read the same blocks, so their answerable questions are the same
                for r, (first, second) in enumerate(zip(*rows)):
                    only_later, only_earlier = disagreements(second, first)
                    tag = f" (fine-tuning seed {r})" if min(map(len, rows)) > 1 else ""
                    lines.append(f"{init} s{seed}: {set_name} answerable questions right with {later} only "
                                 f"{only_later}, {earlier} only {only_earlier}, exact McNemar p "
                                 f"{mcnemar_p(only_later, only_earlier):.3f}{tag}")  # fmt: skip
    return "\n".join(lines)


def replica_spread(result: dict) -> str:
    """Where a QA row has several fine-tuning seeds: per (init, seed, set), each row's answerable questions right
    under each seed, and the most that two of them disagree on; then each of ``PAIRS`` as the difference of the two
    rows' means over their fine-tuning seeds, with its standard error over those seeds (the rows' seeds are not
    paired: sqrt(s_a^2 / n_a + s_b^2 / n_b)), in questions; last, per init and set, that difference averaged over
    the seeds with the exact ``permutation_p`` of the fine-tunings relabelled between the rows within each seed:
    whether the difference stands above the noise of fine-tuning alone."""
    lines = []
    for init, runs in _runs_of(result).items():
        groups = defaultdict(list)  # (set, later, earlier): one (later's, earlier's) counts per seed
        for seed, set_name in ((seed, s) for seed in sorted(runs) for s in EVAL_SETS):
            counts = {}
            for name in QA_ROWS:
                replicas = _qa(runs[seed], name, set_name).get("replicas") or []
                if len(replicas) < 2:
                    continue
                counts[name] = [sum(r) for r in replicas]
                most = max(sum(disagreements(a, b)) for i, a in enumerate(replicas) for b in replicas[i + 1:])
                lines.append(f"{init} s{seed}: {set_name} {name}, {len(replicas)} fine-tuning seeds: "
                             f"{', '.join(map(str, counts[name]))} of {len(replicas[0])} answerable questions right; "
                             f"two of them disagree on at most {most}")  # fmt: skip
            for later, earlier in ((b, a) for b, a in PAIRS if a in counts and b in counts):
                (m_b, e_b), (m_a, e_a) = mean_and_error(counts[later]), mean_and_error(counts[earlier])
                groups[set_name, later, earlier].append((counts[later], counts[earlier]))
                lines.append(f"{init} s{seed}: {set_name} {later} - {earlier} over fine-tuning seeds: "
                             f"{m_b - m_a:+.1f} ± {math.hypot(e_b, e_a):.1f} questions")  # fmt: skip
        for (set_name, later, earlier), pairs in groups.items():
            mean = sum(sum(b) / len(b) - sum(a) / len(a) for b, a in pairs) / len(pairs)
            lines.append(f"{init}: {set_name} {later} - {earlier} over {len(pairs)} seed(s) and their fine-tuning "
                         f"seeds: {mean:+.1f} questions, exact permutation p {permutation_p(pairs):.3f} (each seed's "
                         "fine-tunings relabelled between the two rows)")  # fmt: skip
    return "\n".join(lines)
