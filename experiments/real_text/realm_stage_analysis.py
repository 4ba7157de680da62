"""The analysis of ``experiments/real_text/realm_stage.py``'s rows (issue 55 items 3-4): accuracy per row, step and
endpoint, and the pre-registered test, per-item exact McNemar of REALM at the last step against each control at the last
step, Holm-corrected over the family ``HOLM_FAMILY`` names, per seed.

Reads ``OUT/ROW/stage_eval/step-NNNNNNNN.json`` (one per row and evaluated step; each holds every endpoint's
per-item 0/1 outcomes) and ``OUT/stage.json`` (the stage's settings) of each ``OUT`` given, one per seed.
"""

from __future__ import annotations

import json
from pathlib import Path

from experiments.common.stats import disagreements, mcnemar_p

TREATMENT = "realm"
CONTROLS = ("warm", "closed_book", "frozen")
"""``warm``: REALM's start, no REALM step (its last step is 0); ``closed_book``: the same steps of MLM on the same X
with retrieval off; ``frozen``: REALM with the retriever frozen at its ICT state."""
OUTCOME = "span_correct"
"""The per-item outcome every row is tested on: the whole masked span right *with retrieval* (the same evaluation
applied to every model, the closed-book row included, whose retriever is the ICT one it never trained). The
closed-book outcomes (``closed_book_span_correct``) are reported as accuracies, not tested."""
HOLM_FAMILY = ("endpoint", "control")
"""The Holm family of one seed: every (primary endpoint, control) pair, ``len(primary) x len(CONTROLS)`` tests (the
primary endpoints are ``stage.json``'s ``primary``, fixed by ``--primary`` before the run; the other endpoints'
accuracies are reported, not tested). The
claim the stage is run for ("REALM's steps add what no control explains") needs every control on an endpoint, so
correcting across controls as well as endpoints keeps the chance of any false claim of a seed at ``ALPHA``."""
ALPHA = 0.05
EVAL_DIR = "stage_eval"
STAGE_FILE = "stage.json"


class AnalysisError(ValueError):
    """The outcome files cannot be analysed as asked (the message names the file or the row)."""


def eval_file(row_dir: Path, step: int) -> Path:
    """Where a row's evaluation at ``step`` is written."""
    return row_dir / EVAL_DIR / f"step-{step:08d}.json"


def load_outcomes(out: Path) -> dict[str, dict[int, dict]]:
    """``{row: {step: evaluation}}`` of every ``OUT/ROW/stage_eval/step-*.json``."""
    table: dict[str, dict[int, dict]] = {}
    for path in sorted(Path(out).glob(f"*/{EVAL_DIR}/step-*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            table.setdefault(path.parents[1].name, {})[int(record["step"])] = record
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise AnalysisError(f"{path}: not a realm_stage evaluation ({err!r})") from None
    return table


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given: the i-th smallest p times (m - i), made monotone
    (never below an adjusted p ranked before it), capped at 1."""
    m, adjusted, running = len(pvalues), [0.0] * len(pvalues), 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda j: pvalues[j])):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def last_step(row: str, final: int) -> int:
    """The step a row is tested at: ``warm`` takes no step."""
    return 0 if row == "warm" else final


def seed_tests(outcomes: dict[str, dict[int, dict]], final: int, primary: list[str]) -> list[dict]:
    """The family of one seed: per primary endpoint and per control, the items only REALM gets right at ``final``,
    only the control does at its last step, the exact McNemar p and its Holm adjustment over the tests found; a pair
    not yet evaluated is listed with ``p`` None and makes the family incomplete (``AnalysisError`` is for mismatched
    items)."""
    realm = outcomes.get(TREATMENT, {}).get(final)
    tests = []
    for endpoint in sorted(primary) if realm else []:
        for control in CONTROLS:
            other = outcomes.get(control, {}).get(last_step(control, final))
            test = {"endpoint": endpoint, "control": control, "step": final, "p": None}
            if endpoint in realm["sets"] and other is not None and endpoint in other["sets"]:
                a, b = realm["sets"][endpoint][OUTCOME], other["sets"][endpoint][OUTCOME]
                if len(a) != len(b):
                    raise AnalysisError(f"{endpoint}: {TREATMENT} has {len(a)} items and {control} {len(b)}")
                only_realm, only_control = disagreements(a, b)
                test |= {"items": len(a), "realm_right": sum(a), "control_right": sum(b), "only_realm": only_realm,
                         "only_control": only_control, "p": mcnemar_p(only_realm, only_control)}  # fmt: skip
            tests.append(test)
    found = [t for t in tests if t["p"] is not None]
    for test, adjusted in zip(found, holm([t["p"] for t in found])):
        test["p_holm"] = adjusted
        test["significant"] = adjusted < ALPHA and test["only_realm"] > test["only_control"]
    return tests


def accuracy_rows(outcomes: dict[str, dict[int, dict]]) -> list[dict]:
    """One row per (endpoint, row, step): items and span accuracy with retrieval and closed book."""
    rows = []
    for row, steps in outcomes.items():
        for step, record in sorted(steps.items()):
            for endpoint, figures in record["sets"].items():
                rows.append({"endpoint": endpoint, "row": row, "step": step, "items": figures["items"],
                             "retrieval": figures["span_accuracy"], "closed_book": figures["closed_book_span_accuracy"],
                             "gold_recall_at_k": figures.get("gold_recall_at_k")})  # fmt: skip
    return sorted(rows, key=lambda r: (r["endpoint"], r["row"], r["step"]))


def analyse(outs: list[Path]) -> dict:
    """Every seed's accuracies and tests, and the decision per (endpoint, control): REALM significantly better
    (Holm) in every seed analysed."""
    seeds = []
    for out in outs:
        stage_path = Path(out) / STAGE_FILE
        if not stage_path.is_file():
            raise AnalysisError(f"{stage_path}: no such file (is {out} a realm_stage --out folder?)")
        stage = json.loads(stage_path.read_text(encoding="utf-8"))
        outcomes = load_outcomes(Path(out))
        # note: the primary endpoints are fixed before any run (stage.json); the others are reported, not tested
        tests = seed_tests(outcomes, max(stage["eval_at"]), stage.get("primary") or sorted(stage.get("cloze", {})))
        seeds.append({"out": str(out), "seed": stage["seed"], "final_step": max(stage["eval_at"]),
                      "family_complete": bool(tests) and all(t["p"] is not None for t in tests),
                      "accuracy": accuracy_rows(outcomes), "tests": tests})  # fmt: skip
    pairs = sorted({(t["endpoint"], t["control"]) for s in seeds for t in s["tests"]})
    decision = [{"endpoint": e, "control": c, "realm_better_in_every_seed": all(
        any(t["endpoint"] == e and t["control"] == c and t.get("significant") for t in s["tests"]) for s in seeds)}
        for e, c in pairs]  # fmt: skip
    return {"holm_family": " x ".join(HOLM_FAMILY), "alpha": ALPHA, "outcome": OUTCOME, "seeds": seeds,
            "decision": decision}  # fmt: skip


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def format_analysis(result: dict) -> str:
    lines = []
    for seed in result["seeds"]:
        lines += [f"## seed {seed['seed']} ({seed['out']}); tested at step {seed['final_step']}", "",
                  "| endpoint | row | step | items | with retrieval | closed book | gold recall@k |",
                  "|---|---|---|---|---|---|---|"]  # fmt: skip
        lines += [f"| {r['endpoint']} | {r['row']} | {r['step']} | {r['items']} | {_cell(r['retrieval'])} | "
                  f"{_cell(r['closed_book'])} | {_cell(r['gold_recall_at_k'])} |"
                  for r in seed["accuracy"]]  # fmt: skip
        lines += ["", f"| endpoint | {TREATMENT} against | only {TREATMENT} / only control | McNemar p | Holm p |",
                  "|---|---|---|---|---|"]  # fmt: skip
        for t in seed["tests"]:
            counts = "not evaluated" if t["p"] is None else f"{t['only_realm']} / {t['only_control']}"
            lines.append(f"| {t['endpoint']} | {t['control']} | {counts} | {_cell(t['p'])} | "
                         f"{_cell(t.get('p_holm'))} |")  # fmt: skip
        if not seed["family_complete"]:
            lines.append("\nThe family is incomplete (a row or step not yet evaluated): no claim from this seed.")
        lines.append("")
    lines += [f"REALM better than the control at Holm p < {result['alpha']} in every seed "
              f"(family per seed: {result['holm_family']}):"]  # fmt: skip
    lines += [f"- {d['endpoint']} vs {d['control']}: {'yes' if d['realm_better_in_every_seed'] else 'no'}"
              for d in result["decision"]]  # fmt: skip
    return "\n".join(lines)
