"""The other stages' part of ``realm report RUN``: a section of curves per stage folder that logged metrics.

A ``realm demo`` / ``realm real-text`` run directory holds, beside pre-training's own logs, ``warmup/`` (the reader
warm-up), ``ict/`` (the retriever's ICT warm start) and ``qa/`` (open-domain QA fine-tuning), each with its own
``metrics.jsonl``; a ``realm finetune`` output folder is a QA stage by itself. Each stage becomes a
``<section class="stage" data-stage="NAME">`` holding one plot (the report's ``svg_line_plot``, same data-embedding
scheme) for every numeric series it logged, timings and counts left out. Warm-up and ICT come before pre-training
on the page, QA after, the order the stages run in.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml

from realm.core.logging import read_metrics
from realm.run.layout import CONFIG_FILE, METRICS_FILE
from realm.run.publication import read_manifest

Plot = Callable[..., str]
Series = Callable[[Sequence[dict], str], list]
STAGES = {
    "warmup": "Reader warm-up (realm warmup)",
    "ict": "ICT warm start of the retriever (realm ict)",
    "qa": "QA fine-tuning (realm finetune)",
}
"""Stage folder -> section title."""
BEFORE_PRETRAINING = ("warmup", "ict")
QA_MODEL_DIR = "model"  # realm.finetune.setup.MODEL_DIR (the CLI's report imports no process package)


def is_qa_run(run: Path) -> bool:
    """A ``realm finetune`` output folder: its published ``model/`` has a reader, or (still fine-tuning) its
    config has a ``finetune`` section."""
    manifest = read_manifest(run / QA_MODEL_DIR)
    if manifest is not None:
        return "reader" in manifest
    try:
        config = yaml.safe_load((run / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return False
    return isinstance(config, dict) and "finetune" in config


def stage_sections(run: Path, svg_line_plot: Plot, metric_series: Series) -> tuple[list[str], list[str]]:
    """(sections before the pre-training curves, sections after them) of the stage folders in ``run``."""
    before: list[str] = []
    after: list[str] = []
    for name, title in STAGES.items():
        metrics_path = run / name / METRICS_FILE
        if metrics_path.is_file():
            section = stage_section(name, title, read_metrics(metrics_path), str(run / name), svg_line_plot,
                                    metric_series)  # fmt: skip
            (before if name in BEFORE_PRETRAINING else after).extend(section)
    return before, after


def stage_section(name: str, title: str, metrics: Sequence[dict], folder: str, svg_line_plot: Plot,
                  metric_series: Series) -> list[str]:  # fmt: skip
    """One stage's section: a plot per numeric series of its ``metrics.jsonl``, in name order."""
    keys = sorted({k for r in metrics for k, v in r.items() if _plotted(k, v)})
    steps = [r["step"] for r in metrics if isinstance(r.get("step"), int)]
    span = f"steps {min(steps)} to {max(steps)}" if steps else "no step logged"
    out = [
        f'<section class="stage" data-stage="{html.escape(name)}">',
        f"<h2>{html.escape(title)}</h2>",
        f"<p>{html.escape(folder)}/{METRICS_FILE}: {len(metrics)} records, {span}.</p>",
    ]
    if not keys:
        out.append(f'<p class="missing" data-stage="{html.escape(name)}">No numeric series in {METRICS_FILE}.</p>')
    else:
        out += ['<div class="plots">', *(svg_line_plot(metric_series(metrics, k), k, k) for k in keys), "</div>"]
    out.append("</section>")
    return out


def _plotted(key: str, value: object) -> bool:
    """A training or evaluation signal: a number, not the step, a timing (``time/``) or a count (``num_*``)."""
    if key == "step" or key.startswith("time/") or key.rsplit("/", 1)[-1].startswith("num_"):
        return False
    return isinstance(value, (int, float)) and not isinstance(value, bool)
