"""``realm report RUN [--out FILE]``: one self-contained HTML page from a run's own logs, for users without W&B.

The page has a header (run dir, steps, last index version, ``summary.json``), inline-SVG line plots of the training
signals that tell whether retrieval is being learned (loss, retrieval utility, null-document mass, gold recall, index
staleness), and the most recent sample retrievals from ``RUN/retrievals.jsonl``; the curves of the other stages a
run folder holds (``warmup/``, ``ict/``, ``qa/``) or of a QA run alone have a section each (``realm.cli.report_stages``).
No scripts, stylesheets or fonts are loaded from anywhere; every string that comes from the logs is HTML-escaped.

Data-embedding scheme (what tests and other tools can parse back): every plot is an
``<svg class="plot" data-metric="METRIC" data-values="[[step, value], ...]" data-num-skipped="N">`` whose
``data-values`` is JSON of the finite ``(step, value)`` pairs in log order (``N`` non-finite ones were skipped), and
which contains one ``<polyline data-metric="METRIC" points="x,y x,y ...">`` with one point per pair. A series absent
from the logs gets ``<p class="missing" data-metric="METRIC">`` instead of a plot. Each sample retrieval is a
``<section class="retrieval" data-step="S">`` holding a ``<table class="sample">`` (query, gold, prediction, ...) and a
``<table class="slots">`` with one ``<tr class="slot">`` per slot (slot 0 is the null document).
"""

from __future__ import annotations

import argparse
import html
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from realm.cli.report_knnlm import is_knnlm_results, knnlm_sections
from realm.cli.report_stages import STAGES, is_qa_run, stage_section, stage_sections
from realm.core.argparser import ArgumentParser
from realm.core.atomic import write_text_atomic
from realm.core.errors import RunError, run_command
from realm.core.logging import read_metrics
from realm.run.layout import METRICS_FILE, RETRIEVALS_FILE, SUMMARY_FILE

# (title, metric) of the fixed plots; the held-out curve and a recall plot for every eval/gold_recall_at_* key found
# go after the first three.
PLOTS: tuple[tuple[str, str], ...] = (
    ("Loss", "train/loss"),
    ("Retrieval utility", "train/retrieval_utility"),
    ("Null-document mass p(z = null | x)", "train/null_doc_prob"),
    ("Queries with the masked answer in a retrieved block", "train/answer_recall"),
    ("Index staleness (steps since the index's encoder)", "index/staleness"),
)
RECALL_PREFIX = "eval/gold_recall_at_"
HELDOUT_PLOT = ("Held-out span accuracy, with retrieval (train.eval_interval)", "eval/span_accuracy")

_WIDTH, _HEIGHT = 640, 260
_LEFT, _RIGHT, _TOP, _BOTTOM = 72, 16, 28, 42
_MAX_MARKERS = 60  # draw a dot per point only for short series (a single point has no visible line)

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; max-width: 1400px; }
table { border-collapse: collapse; margin: 0.4em 0; }
td, th { border: 1px solid #ccc; padding: 2px 6px; text-align: left; vertical-align: top; font-size: 13px; }
th { background: #f3f3f3; }
.plots { display: flex; flex-wrap: wrap; gap: 12px; }
svg.plot { border: 1px solid #ddd; background: #fff; }
svg.plot text { font-family: sans-serif; font-size: 11px; fill: #333; }
svg.plot text.title { font-size: 13px; font-weight: bold; }
svg.plot .axis { stroke: #333; stroke-width: 1; }
svg.plot .grid { stroke: #eee; stroke-width: 1; }
svg.plot polyline { fill: none; stroke: #1f77b4; stroke-width: 1.6; }
svg.plot circle { fill: #1f77b4; }
.missing { color: #a33; }
section.retrieval { margin: 1em 0; padding: 0.5em; border-left: 3px solid #1f77b4; }
tr.gold td { background: #eefbea; }
td.num { text-align: right; font-family: monospace; }
"""


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """Round tick values (1, 2, 5 x 10^k steps) covering [lo, hi]; hi > lo."""
    raw = (hi - lo) / target
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    tick = first
    while tick <= hi + step * 1e-9:
        ticks.append(0.0 if abs(tick) < step * 1e-9 else tick)
        tick += step
    return ticks


def _padded_range(lo: float, hi: float) -> tuple[float, float]:
    if hi > lo:
        return lo, hi
    pad = abs(lo) * 0.1 or 1.0  # a constant series (or one point) gets a band around its value
    return lo - pad, hi + pad


def svg_line_plot(series: list[tuple[float, float]], title: str, metric: str, x_label: str = "step") -> str:
    """An inline ``<svg>`` line plot of ``(step, value)`` pairs with axes, ticks, a title and the metric name.

    Non-finite values (NaN, inf) are skipped and counted in ``data-num-skipped``. The y axis is logarithmic when every
    value is positive and they span more than three decades (the null-document mass lives around 1e-12). The finite
    pairs are embedded as JSON in ``data-values`` (see the module docstring).
    """
    points = [(s if isinstance(s, int) else float(s), float(v)) for s, v in series if _is_number(v) and math.isfinite(v)]
    num_skipped = len(series) - len(points)
    values = [v for _, v in points]
    log_y = bool(values) and min(values) > 0 and max(values) / min(values) > 1e3
    plot_w, plot_h = _WIDTH - _LEFT - _RIGHT, _HEIGHT - _TOP - _BOTTOM
    data_json = json.dumps([[s, v] for s, v in points])
    out = [
        f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{_HEIGHT}" '
        f'viewBox="0 0 {_WIDTH} {_HEIGHT}" role="img" data-metric="{_esc(metric)}" data-values="{_esc(data_json)}" '
        f'data-num-skipped="{num_skipped}" data-log-y="{str(log_y).lower()}">',
        f"<title>{_esc(title)} ({_esc(metric)})</title>",
        f'<text class="title" x="{_LEFT}" y="17">{_esc(title)}</text>',
        f'<text class="metric" x="{_WIDTH - _RIGHT}" y="17" text-anchor="end">{_esc(metric)}'
        + (" (log scale)" if log_y else "")
        + (f", {num_skipped} non-finite skipped" if num_skipped else "")
        + "</text>",
    ]
    x0, y0 = _LEFT, _TOP + plot_h
    axes = [
        f'<line class="axis" x1="{x0}" y1="{_TOP}" x2="{x0}" y2="{y0}"/>',
        f'<line class="axis" x1="{x0}" y1="{y0}" x2="{x0 + plot_w}" y2="{y0}"/>',
    ]  # drawn after the grid so a grid line at the bottom does not hide the x axis
    out.append(f'<text x="{x0 + plot_w / 2:.1f}" y="{_HEIGHT - 6}" text-anchor="middle">{_esc(x_label)}</text>')
    if not points:
        out.append(
            f'<text x="{x0 + plot_w / 2:.1f}" y="{_TOP + plot_h / 2:.1f}" text-anchor="middle">'
            "no finite values</text>"
        )
        out += axes
        out.append(f'<polyline data-metric="{_esc(metric)}" points=""/>')
        out.append("</svg>")
        return "\n".join(out)

    steps = [s for s, _ in points]
    x_lo, x_hi = _padded_range(float(min(steps)), float(max(steps)))
    ys = [math.log10(v) for v in values] if log_y else values
    y_lo, y_hi = _padded_range(min(ys), max(ys))
    if log_y:  # whole decades, so the ticks are powers of ten
        y_lo, y_hi = math.floor(y_lo), math.ceil(y_hi)

    def sx(step: float) -> float:
        return x0 + (step - x_lo) / (x_hi - x_lo) * plot_w

    def sy(y: float) -> float:
        return y0 - (y - y_lo) / (y_hi - y_lo) * plot_h

    for tick in _nice_ticks(x_lo, x_hi):
        x = sx(tick)
        label = f"{tick:g}" if abs(tick) < 1e6 else f"{tick:.2e}"
        out.append(f'<line class="axis" x1="{x:.1f}" y1="{y0}" x2="{x:.1f}" y2="{y0 + 4}"/>')
        out.append(f'<text x="{x:.1f}" y="{y0 + 16}" text-anchor="middle">{label}</text>')
    y_ticks = _nice_ticks(y_lo, y_hi) if not log_y else [float(d) for d in range(int(y_lo), int(y_hi) + 1)]
    if log_y and len(y_ticks) > 8:  # thin out decades on very wide ranges
        stride = math.ceil(len(y_ticks) / 8)
        y_ticks = y_ticks[::stride]
    for tick in y_ticks:
        y = sy(tick)
        label = f"1e{int(tick)}" if log_y else f"{tick:.4g}"
        out.append(f'<line class="grid" x1="{x0}" y1="{y:.1f}" x2="{x0 + plot_w}" y2="{y:.1f}"/>')
        out.append(f'<line class="axis" x1="{x0 - 4}" y1="{y:.1f}" x2="{x0}" y2="{y:.1f}"/>')
        out.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')

    out += axes
    coords = [(sx(s), sy(y)) for s, y in zip(steps, ys)]
    out.append(
        f'<polyline data-metric="{_esc(metric)}" points="' + " ".join(f"{x:.1f},{y:.1f}" for x, y in coords) + '"/>'
    )
    if len(coords) <= _MAX_MARKERS:
        out.extend(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.2"/>' for x, y in coords)
    out.append("</svg>")
    return "\n".join(out)


def metric_series(metrics: Sequence[dict], metric: str) -> list[tuple[int, float]]:
    """``(step, value)`` of every record that logged ``metric`` as a number, in log order."""
    return [
        (int(r["step"]), float(r[metric])) for r in metrics if _is_number(r.get(metric)) and _is_number(r.get("step"))
    ]


def _header(metrics: Sequence[dict], summary: dict | None, run_dir: str) -> list[str]:
    steps = [r["step"] for r in metrics if _is_number(r.get("step"))]
    versions = [r["index/version"] for r in metrics if _is_number(r.get("index/version"))]
    rows = [
        ("run dir", run_dir),
        ("records in metrics.jsonl", len(metrics)),
        ("steps", f"{min(steps)} to {max(steps)}" if steps else "none logged"),
        ("last index version", versions[-1] if versions else "not logged"),
    ]
    out = [
        f"<h1>realm report: {_esc(os.path.basename(os.path.normpath(run_dir)) or run_dir)}</h1>",
        '<table class="header">',
    ]
    out += [f"<tr><th>{_esc(k)}</th><td>{_esc(_fmt(v))}</td></tr>" for k, v in rows]
    out.append("</table>")
    if summary is None:
        out.append('<p class="missing">No summary.json in the run directory.</p>')
    else:
        out.append('<h2>summary.json</h2><table class="summary">')
        for key, value in _flatten(summary):
            out.append(f"<tr><th>{_esc(key)}</th><td>{_esc(_fmt(value))}</td></tr>")
        out.append("</table>")
    return out


def _flatten(mapping: dict, prefix: str = "") -> list[tuple[str, Any]]:
    """Nested dicts become dotted keys, so a summary's ``stage_seconds`` reads as one row per stage."""
    rows: list[tuple[str, Any]] = []
    for key, value in mapping.items():
        if isinstance(value, dict) and value:
            rows += _flatten(value, f"{prefix}{key}.")
        else:
            rows.append((f"{prefix}{key}", json.dumps(value) if isinstance(value, (list, dict)) else value))
    return rows


def _plots(metrics: Sequence[dict]) -> list[str]:
    recall_keys = sorted({k for r in metrics for k in r if k.startswith(RECALL_PREFIX)})
    recall_plots = [(f"Gold recall@{k[len(RECALL_PREFIX):]}", k) for k in recall_keys]
    wanted = [*PLOTS[:3], HELDOUT_PLOT, *recall_plots, *PLOTS[3:]]
    figures, missing = [], []
    for title, metric in wanted:
        series = metric_series(metrics, metric)
        if series:
            figures.append(svg_line_plot(series, title, metric))
        else:
            missing.append(metric)
    if not recall_keys:
        missing.insert(min(4, len(missing)), RECALL_PREFIX + "*")
    out = ["<h2>Training signals</h2>", '<div class="plots">', *figures, "</div>"]
    out += [
        f'<p class="missing" data-metric="{_esc(m)}">No <code>{_esc(m)}</code> series in metrics.jsonl; plot skipped.</p>'
        for m in missing
    ]
    return out


def _retrieval_section(record: dict) -> str:
    sample_rows = [
        (k, record.get(k, "")) for k in ("query", "gold", "prediction", "step", "index_version", "staleness")
    ]
    out = [f'<section class="retrieval" data-step="{_esc(record.get("step", ""))}">', '<table class="sample">']
    out += [f'<tr><th>{_esc(k)}</th><td class="{k}">{_esc(_fmt(v))}</td></tr>' for k, v in sample_rows]
    out.append("</table>")
    out.append(
        '<table class="slots"><tr><th>slot</th><th>title</th><th>snippet</th><th>p(z|x)</th>'
        "<th>p(y|z,x)</th><th>gold</th></tr>"
    )
    for i, slot in enumerate(record.get("slots") or []):
        has_gold = bool(slot.get("has_gold"))
        name = "0 (null)" if i == 0 else str(i)
        out.append(
            f'<tr class="slot{" gold" if has_gold else ""}"><td>{name}</td>'
            f'<td class="title">{_esc(slot.get("title", ""))}</td><td class="snippet">{_esc(slot.get("snippet", ""))}</td>'
            f'<td class="num p_z">{_esc(_fmt(slot.get("p_z", "")))}</td>'
            f'<td class="num p_y">{_esc(_fmt(slot.get("p_y", "")))}</td>'
            f'<td class="has_gold">{"&#10003;" if has_gold else ""}</td></tr>'
        )
    out.append("</table></section>")
    return "\n".join(out)


def render_report(
    metrics: list[dict],
    retrievals: list[dict] | None,
    summary: dict | None,
    run_dir: str,
    num_retrievals: int = 20,
    body: list[str] | None = None,
    stages: tuple[list[str], list[str]] = ([], []),
) -> str:
    """The whole HTML page. ``retrievals=None`` means the run has no retrievals.jsonl (said so on the page).

    The most recent ``num_retrievals`` samples (the file's last lines) are shown newest first. ``body`` replaces the
    training plots and retrievals (a kNN-LM results folder: ``realm.cli.report_knnlm``; a QA run's curves).
    ``stages`` are the sections of the other stages' folders that go before and after them
    (``realm.cli.report_stages``).
    """
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>realm report: {_esc(run_dir)}</title>",
        f"<style>{_CSS}</style></head><body>",
    ]
    out += _header(metrics, summary, run_dir)
    out += stages[0]
    if body is not None:
        out += body
    else:
        out += _plots(metrics)
        out += _retrievals(retrievals, num_retrievals)
    out += stages[1]
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _retrievals(retrievals: list[dict] | None, num_retrievals: int) -> list[str]:
    out = ["<h2>Sample retrievals</h2>"]
    if retrievals is None:
        out.append('<p class="missing" id="no-retrievals">No retrievals.jsonl in the run directory.</p>')
    elif not retrievals:
        out.append('<p class="missing" id="no-retrievals">retrievals.jsonl is empty.</p>')
    else:
        recent = retrievals[-num_retrievals:][::-1] if num_retrievals > 0 else []
        out.append(
            f"<p>The {len(recent)} most recent of {len(retrievals)} samples, newest first. "
            "Slot 0 is the null document; &#10003; marks a slot that holds the gold answer.</p>"
        )
        out += [_retrieval_section(r) for r in recent]
    return out


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = ArgumentParser(prog="realm report", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "run_dir", help="run directory holding metrics.jsonl (and optionally summary.json, " "retrievals.jsonl)"
    )
    parser.add_argument("--out", default=None, help="output HTML file (default RUN/report.html)")
    parser.add_argument("--num-retrievals", type=int, default=20, help="most recent sample retrievals to show")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    run = Path(args.run_dir)
    metrics_path = run / METRICS_FILE
    stages = stage_sections(run, svg_line_plot, metric_series) if run.is_dir() else ([], [])
    if not run.is_dir() or not (metrics_path.is_file() or any(stages)):
        what = "run directory not found" if not run.is_dir() else "no metrics.jsonl in the run directory"
        where = f"{metrics_path} (nor in a {', '.join(STAGES)} stage folder)" if run.is_dir() else run
        raise RunError(f"{what}: {where}")
    metrics = read_metrics(metrics_path) if metrics_path.is_file() else []
    retrievals_path = run / RETRIEVALS_FILE
    retrievals = read_metrics(retrievals_path) if retrievals_path.is_file() else None
    summary_path = run / SUMMARY_FILE
    summary = None
    if summary_path.is_file():
        try:
            summary = json.loads(summary_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:  # a run killed mid-write still gets its plots
            summary = {"summary.json unreadable": str(err)}
        if not isinstance(summary, dict):
            summary = {SUMMARY_FILE: json.dumps(summary)}
    body = None
    if is_knnlm_results(run):
        body = knnlm_sections(run, svg_line_plot)
    elif is_qa_run(run):  # a realm finetune output folder: its own metrics are a QA stage
        body = stage_section("qa", STAGES["qa"], metrics, str(run), svg_line_plot, metric_series)
    elif not metrics_path.is_file():  # the stages that ran before pre-training, or after it elsewhere
        body = ['<p class="missing" id="no-pretraining">No metrics.jsonl in the run directory: no pre-training '
                "curves.</p>"]  # fmt: skip
    page = render_report(metrics, retrievals, summary, str(run), args.num_retrievals, body, stages)
    out = Path(args.out) if args.out else run / "report.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, page)  # a reader never sees a half-written page
    print(f"realm report: wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_command("realm report", main, sys.argv[1:]))
