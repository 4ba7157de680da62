"""``realm report`` on a run folder with warm-up, ICT and QA stage folders, and on a QA run alone: a section per
stage, each plotting exactly the series its own ``metrics.jsonl`` logged (timings and counts left out)."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

from realm.cli.main import main as realm_main
from realm.cli.report import main

STAGE_METRICS = {
    "warmup": [{"step": 10, "warmup/loss": 7.5, "warmup/mlm_accuracy": 0.1, "time/elapsed_s": 1.0},
               {"step": 20, "warmup/loss": 5.25, "warmup/mlm_accuracy": 0.4, "time/elapsed_s": 2.0}],
    "ict": [{"step": 5, "ict/loss": 1.5, "ict/accuracy": 0.5}, {"step": 10, "ict/loss": 0.75, "ict/accuracy": 0.875}],
    "qa": [{"step": 0, "eval/exact_match": 0.0, "eval/num_questions": 8},
           {"step": 4, "train/loss": 3.5, "train/reader_loss": 3.0, "time/step_s": 0.1},
           {"step": 8, "train/loss": 2.5, "train/reader_loss": 2.0},
           {"step": 8, "eval/exact_match": 0.5, "eval/num_questions": 8}],
}  # fmt: skip
PRETRAIN = [{"step": 1, "train/loss": 9.0}, {"step": 2, "train/loss": 8.0}]


class StageParser(HTMLParser):
    """Each plot's ``data-values`` by (section stage, metric); plots outside a stage section are stage ``None``."""

    def __init__(self) -> None:
        super().__init__()
        self.plots: dict[tuple[str | None, str], list] = {}
        self.order: list[str | None] = []
        self._stage: str | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if tag == "section" and a.get("class") == "stage":
            self._stage = a["data-stage"]
            self.order.append(self._stage)
        elif tag == "svg" and "plot" in a.get("class", ""):
            if self._stage is None and None not in self.order:
                self.order.append(None)
            self.plots[(self._stage, a["data-metric"])] = json.loads(a["data-values"])

    def handle_endtag(self, tag: str) -> None:
        if tag == "section":
            self._stage = None


def _write(folder: Path, records: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def _parse(page: Path) -> StageParser:
    parser = StageParser()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


def _expected(stage: str) -> dict[tuple[str, str], list]:
    records = STAGE_METRICS[stage]
    keys = {k for r in records for k in r if k != "step" and not k.startswith("time/") and "num_" not in k}
    return {(stage, k): [[r["step"], r[k]] for r in records if k in r] for k in keys}


def test_report_has_a_section_per_stage_in_the_order_they_run(tmp_path: Path):
    run = tmp_path / "demo"
    _write(run, PRETRAIN)
    for stage, records in STAGE_METRICS.items():
        _write(run / stage, records)
    assert main([str(run)]) == 0
    page = _parse(run / "report.html")
    assert page.order == ["warmup", "ict", None, "qa"]  # warm-up, ICT, pre-training, QA
    want = {key: v for stage in STAGE_METRICS for key, v in _expected(stage).items()}
    assert {k: v for k, v in page.plots.items() if k[0] is not None} == want
    assert page.plots[(None, "train/loss")] == [[1, 9.0], [2, 8.0]]  # pre-training's own curve, apart from QA's


def test_report_on_a_qa_run_alone_plots_its_curves(tmp_path: Path):
    run = tmp_path / "qa"
    _write(run, STAGE_METRICS["qa"])
    (run / "config.yaml").write_text("finetune:\n  retriever_beam: 5\n")  # a realm finetune output folder
    assert main([str(run)]) == 0
    page = _parse(run / "report.html")
    assert page.order == ["qa"] and page.plots == _expected("qa")
    assert "train/retrieval_utility" not in (run / "report.html").read_text()  # no pre-training series asked for


def test_report_on_warm_start_stages_alone_and_on_an_empty_folder(tmp_path: Path, capsys):
    run = tmp_path / "stopped"
    _write(run / "warmup", STAGE_METRICS["warmup"])
    assert main([str(run)]) == 0
    text = (run / "report.html").read_text()
    assert _parse(run / "report.html").order == ["warmup"] and 'id="no-pretraining"' in text
    empty = tmp_path / "empty"
    empty.mkdir()
    assert realm_main(["report", str(empty)]) == 2
    assert "no metrics.jsonl in the run directory" in capsys.readouterr().err
