"""The kNN-LM part of ``realm report RESULTS``: plots of a sweep and a per-token table, from the files
``realm knnlm evaluate`` / ``realm knnlm sweep`` write (``sweep.jsonl``, ``tokens.jsonl``).

Plots use the report's ``svg_line_plot`` (same data-embedding scheme; the x value is the swept setting): the
interpolated perplexity against lambda, k and tau, each through the best setting of the other two. The per-token
table groups tokens by the LM's own probability of them, the analysis behind "kNN-LM helps most on rare tokens".
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from pathlib import Path

from realm.core.logging import read_metrics

SWEEP_FILE = "sweep.jsonl"
TOKENS_FILE = "tokens.jsonl"
Plot = Callable[..., str]
# p_LM buckets of the per-token table: [lo, hi)
_BUCKETS = ((0.0, 0.01), (0.01, 0.1), (0.1, 0.5), (0.5, 1.01))


def is_knnlm_results(run: Path) -> bool:
    return (run / SWEEP_FILE).is_file() or (run / TOKENS_FILE).is_file()


def _sweep_plots(rows: list[dict], svg_line_plot: Plot) -> list[str]:
    best = min(rows, key=lambda r: r["ppl_knnlm"])
    out = ["<h2>kNN-LM sweep</h2>", f"<p>LM alone: perplexity {best['ppl_lm']:.4g}; best kNN-LM {best['ppl_knnlm']:.4g} "
           f"at k={best['k']}, tau={best['tau']}, lambda={best['lambda']} (chosen on this data).</p>",
           '<div class="plots">']  # fmt: skip
    for axis, others in (("lambda", ("k", "tau")), ("k", ("tau", "lambda")), ("tau", ("k", "lambda"))):
        chosen = sorted((r[axis], r["ppl_knnlm"]) for r in rows if all(r[o] == best[o] for o in others))
        fixed = ", ".join(f"{o}={best[o]}" for o in others)
        out.append(svg_line_plot(chosen, f"kNN-LM perplexity vs {axis} ({fixed})", f"ppl_knnlm_by_{axis}", axis))
    out.append("</div>")
    return out


def _token_table(records: list[dict]) -> list[str]:
    out = ["<h2>Per-token: where the datastore helps</h2>", '<table class="tokens"><tr><th>p_LM of the token</th>'
           "<th>tokens</th><th>mean log p_LM</th><th>mean log p (kNN-LM)</th><th>improved</th></tr>"]  # fmt: skip
    for lo, hi in _BUCKETS:
        chosen = [r for r in records if lo <= r["p_lm"] < hi]
        if not chosen:
            continue
        lm = sum(math.log(max(r["p_lm"], 1e-300)) for r in chosen) / len(chosen)
        mixed = sum(math.log(max(r["p"], 1e-300)) for r in chosen) / len(chosen)
        improved = sum(r["p"] > r["p_lm"] for r in chosen) / len(chosen)
        out.append(f'<tr class="bucket"><td>[{lo:g}, {min(hi, 1):g})</td><td>{len(chosen)}</td><td>{lm:.3f}</td>'
                   f"<td>{mixed:.3f}</td><td>{improved:.1%}</td></tr>")  # fmt: skip
    out.append("</table>")
    return out


def knnlm_sections(run: Path, svg_line_plot: Plot) -> list[str]:
    """The report body of a kNN-LM results folder; ``svg_line_plot`` draws (it is the report's, passed in so this
    module does not import the one that imports it)."""
    out = []
    if (run / SWEEP_FILE).is_file():
        rows = read_metrics(run / SWEEP_FILE)
        out += _sweep_plots(rows, svg_line_plot) if rows else ['<p class="missing">sweep.jsonl is empty.</p>']
    if (run / TOKENS_FILE).is_file():
        records = read_metrics(run / TOKENS_FILE)
        out += _token_table(records) if records else ['<p class="missing">tokens.jsonl is empty.</p>']
    return out or [f'<p class="missing">{html.escape(str(run))} holds no kNN-LM results.</p>']
