"""``realm report``: the HTML page embeds exactly the logged data, escapes log strings, and says what is missing.

The page is parsed back with the standard library's ``html.parser`` using the scheme documented in
``trainer/report.py``: ``<svg class="plot" data-metric=... data-values="[[step, value], ...]">`` around one
``<polyline data-metric=... points=...>``, ``<p class="missing" data-metric=...>`` for absent series, and
``<section class="retrieval">`` tables for sample retrievals.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from realm.cli.main import main as realm_main
from realm.cli.report import main, svg_line_plot

STEPS = [10, 20, 30, 40]
TRAIN = {
    "train/loss": [8.5, 7.25, 6.0, 5.5],
    "train/retrieval_utility": [0.0, 0.01, -0.02, 0.05],
    "index/staleness": [10, 20, 5, 15],
}
RECALL = {20: 0.25, 40: 0.5}  # eval/gold_recall_at_k, logged at two steps

RETRIEVALS = [
    {
        "step": step,
        "index_version": step - 10,
        "staleness": 10,
        "query": f"Ada was born in [MASK] ({step})",
        "gold": "London",
        "prediction": "Paris" if step < 30 else "London",
        "slots": [
            {"title": "", "snippet": "", "p_z": 0.1, "p_y": 0.01, "has_gold": False},
            {"title": "Ada <b>Lovelace</b>", "snippet": "born in London & raised", "p_z": 0.7, "p_y": 0.9,
             "has_gold": True},
            {"title": "Paris", "snippet": "a city", "p_z": 0.2, "p_y": 0.05, "has_gold": False},
        ],
    }
    for step in STEPS
]  # fmt: skip


class PageParser(HTMLParser):
    """Collects plots, missing-series notes and retrieval tables from a report page."""

    def __init__(self) -> None:
        super().__init__()
        self.plots: dict[str, dict] = {}  # metric -> {"values": [...], "points": [...]}
        self.missing: list[str] = []
        self.sections: list[dict] = []  # {"sample": {field: text}, "slots": [[cell texts]]}
        self._svg: str | None = None
        self._cell: dict | None = None  # {"class": ..., "text": [...]} of the <td> being read
        self._row: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if tag == "svg" and "plot" in a.get("class", ""):
            self._svg = a["data-metric"]
            self.plots[self._svg] = {"values": json.loads(a["data-values"]), "points": None}
        elif tag == "polyline" and self._svg is not None:
            assert a["data-metric"] == self._svg
            self.plots[self._svg]["points"] = a["points"].split()
        elif tag == "p" and "missing" in a.get("class", "") and "data-metric" in a:
            self.missing.append(a["data-metric"])
        elif tag == "section" and a.get("class") == "retrieval":
            self.sections.append({"sample": {}, "slots": []})
        elif tag == "tr" and self.sections and "slot" in (a.get("class") or "").split():
            self._row = []
            self.sections[-1]["slots"].append(self._row)
        elif tag == "td" and self.sections:
            self._cell = {"class": a.get("class", ""), "text": []}

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self._svg = None
        elif tag == "td" and self._cell is not None:
            text = "".join(self._cell["text"])
            if self._row is not None:
                self._row.append(text)
            else:
                self.sections[-1]["sample"][self._cell["class"]] = text
            self._cell = None
        elif tag == "tr":
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell["text"].append(data)


def write_jsonl(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


@pytest.fixture
def run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    records = []
    for i, step in enumerate(STEPS):
        records.append({"step": step, **{k: v[i] for k, v in TRAIN.items()}, "index/version": step - 10})
        if step in RECALL:
            records.append({"step": step, "eval/gold_recall_at_k": RECALL[step], "eval/span_accuracy": 0.1})
    write_jsonl(run / "metrics.jsonl", records)
    write_jsonl(run / "retrievals.jsonl", RETRIEVALS)
    (run / "summary.json").write_text(json.dumps({"pretrain_steps": 40, "stage_seconds": {"ict_s": 1.5}}))
    return run


def parse(path: Path) -> PageParser:
    parser = PageParser()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def test_report_plots_embed_exactly_the_logged_series(run: Path):
    assert main([str(run)]) == 0
    page = parse(run / "report.html")
    expected = {k: list(zip(STEPS, v)) for k, v in TRAIN.items()}
    expected["eval/gold_recall_at_k"] = list(RECALL.items())
    expected["eval/span_accuracy"] = [(step, 0.1) for step in RECALL]  # the held-out learning curve
    assert set(expected) <= set(page.plots)
    for metric, pairs in expected.items():
        plot = page.plots[metric]
        assert [tuple(p) for p in plot["values"]] == pairs, metric
        assert len(plot["points"]) == len(pairs), metric


def test_report_says_which_series_are_missing(run: Path):
    assert main([str(run)]) == 0
    page = parse(run / "report.html")
    assert "train/null_doc_prob" in page.missing and "train/null_doc_prob" not in page.plots
    assert "train/loss" not in page.missing


def test_retrieval_tables_match_the_file_newest_first_and_escaped(run: Path, tmp_path: Path):
    out = tmp_path / "elsewhere" / "page.html"
    assert main([str(run), "--out", str(out), "--num-retrievals", "3"]) == 0
    text = out.read_text(encoding="utf-8")
    assert "<b>Lovelace</b>" not in text and "&lt;b&gt;Lovelace&lt;/b&gt;" in text
    sections = parse(out).sections
    assert len(sections) == 3
    for section, record in zip(sections, RETRIEVALS[::-1]):
        assert section["sample"]["query"] == record["query"]
        assert section["sample"]["gold"] == record["gold"]
        assert section["sample"]["prediction"] == record["prediction"]
        assert len(section["slots"]) == len(record["slots"])
        for row, slot in zip(section["slots"], record["slots"]):
            _, title, snippet, p_z, p_y, mark = row
            assert (title, snippet) == (slot["title"], slot["snippet"])
            assert math.isclose(float(p_z), slot["p_z"]) and math.isclose(float(p_y), slot["p_y"])
            assert (mark == "\u2713") == slot["has_gold"]


def test_missing_retrievals_and_summary_are_reported(run: Path):
    (run / "retrievals.jsonl").unlink()
    (run / "summary.json").unlink()
    assert main([str(run)]) == 0
    text = (run / "report.html").read_text(encoding="utf-8")
    assert 'id="no-retrievals"' in text and "No summary.json" in text


def test_missing_run_or_metrics_exits_2_with_one_line(tmp_path: Path, capsys):
    assert realm_main(["report", str(tmp_path / "nope")]) == 2
    assert realm_main(["report", str(tmp_path)]) == 2  # a directory without metrics.jsonl
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("realm report: error:") for line in err)
    assert "nope" in err[0] and "metrics.jsonl" in err[1]


@pytest.mark.parametrize(
    "series, num_points",
    [([(5, 1.0)], 1), ([(1, 3.0), (2, 3.0), (3, 3.0)], 3), ([(1, 1.0), (2, float("nan")), (3, float("inf")), (4, 2.0)], 2),
     ([(1, 1e-9), (2, 1e-15)], 2), ([(1, float("nan"))], 0)],
)  # fmt: skip
def test_svg_line_plot_handles_one_point_constant_and_non_finite(series, num_points):
    parser = PageParser()
    parser.feed(svg_line_plot(series, "T <x>", "m/<y>"))
    plot = parser.plots["m/<y>"]
    assert len(plot["values"]) == len(plot["points"]) == num_points
    assert all(math.isfinite(float(c)) for p in plot["points"] for c in p.split(","))


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")
def test_report_renders_in_headless_chromium(run: Path, tmp_path: Path):
    assert main([str(run)]) == 0
    argv = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom", (run / "report.html").resolve().as_uri()]  # fmt: skip
    dom = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout
    parser = PageParser()
    parser.feed(dom)
    assert {"train/loss", "eval/gold_recall_at_k", "index/staleness"} <= set(parser.plots)
