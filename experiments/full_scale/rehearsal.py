"""The scale rehearsal (issue 58): the full-scale recipe's stages over a generated DPR corpus of N passages, each stage
as its own process through the project's own commands, with its wall time and peak memory against N.

For each N (``--passages 100000,300000,1000000``): ``experiments/full_scale/rehearsal_corpus.py`` writes the corpus
(generated text, not the Vital leads repeated; that file says why), then the stages of
``experiments/full_scale/rehearsal_stages.py`` run in order in ``OUT/n-N/``: blocks and cloze sets (``realm real-text
--stop_after=data``), tagging (``realm tag``, rule tagger), reader warm-up and ICT (BERT-base, random init, 2 steps
each), the trainer with its child builder over the N-block Flat index (tiny model), the builder for each other index
(``realm index --once``: IVF-PQ, HNSW), search of all three (``realm inspect --queries``), and the held-out evaluation
(``realm evaluate-mlm``, streamed exact search). Each stage's peak anonymous memory (the whole process tree) is set
against the bound its config implies. Then, per stage, the log-log slope of wall and peak over N, and the projection to
DPR's 21M passages on 8 and 64 GPUs (``experiments/full_scale/rehearsal_fit.py``: each assumption named there).

    python -m experiments.full_scale.rehearsal --passages 10000,30000 --out /tmp/rehearsal --json rehearsal.json
    python -m experiments.full_scale.rehearsal --table rehearsal.json      # the markdown tables of a finished run
    python -m experiments.full_scale.rehearsal --table r100k.json r1m.json --json both.json   # runs of several sizes
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from pathlib import Path
from typing import Any

from benchmarks.harness import REPO, minilm_path, write_json  # isort:skip  (first: no hub, no W&B)
from experiments.full_scale.rehearsal_fit import assumptions, growth_exponent, markdown, project  # noqa: E402
from experiments.full_scale.rehearsal_measure import StageFailed, measure, offline_env  # noqa: E402
from experiments.full_scale.rehearsal_stages import FACTORIES, STAGE_NAMES, STAGES, Context, index_run  # noqa: E402

NUM_QUERIES = 64
PROJECTED_GPUS = ((8, 1), (8, 4), (64, 1), (64, 16))
"""(GPUs, of which builder GPUs): launch/pretrain.sh's default (the builder on the last GPU) and a builder spread over
several (BUILDER_GPUS, BUILDER_NODES=all): one builder GPU cannot refresh 21M blocks within max_staleness steps."""
_LOG_TIME = re.compile(r"^(\d\d):(\d\d):(\d\d) ")


def write_queries(ctx: Context) -> None:
    """``OUT/run/queries.txt``: the first sentence of each of the corpus's first ``NUM_QUERIES`` passages."""
    lines = []
    with (ctx.out / "corpus.tsv").open(encoding="utf-8", newline="") as f:
        rows = csv.reader(f, delimiter="\t")
        next(rows)
        for row, _ in zip(rows, range(NUM_QUERIES)):
            lines.append(row[1].split(". ")[0])
    (ctx.run / "queries.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _seconds(line: str) -> int | None:
    match = _LOG_TIME.match(line)
    return None if match is None else int(match[1]) * 3600 + int(match[2]) * 60 + int(match[3])


def builder_phases(log: Path) -> dict[str, int]:
    """Seconds of a build's embedding and of its FAISS build + publish, from the builder's log lines ("building
    index", the index plan logged once the embeddings are written, "published"); one-second resolution."""
    marks: dict[str, int] = {}
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        for key, text in (("start", "building index for"), ("embedded", "] INFO index "), ("published", "published ")):
            if text in line and key not in marks and (t := _seconds(line)) is not None:
                marks[key] = t
    if len(marks) < 3:
        return {}
    day = 86_400  # note: a build across midnight
    return {"embed_s": (marks["embedded"] - marks["start"]) % day,
            "faiss_s": (marks["published"] - marks["embedded"]) % day}  # fmt: skip


def run_size(num_passages: int, out: Path, names: list[str], threads: int, tokenizer: str) -> dict[str, Any]:
    """Runs the named stages over ``num_passages`` in ``out``; returns {stage: measured figures or the failure}."""
    ctx = Context(out=out, num_passages=num_passages, tokenizer=tokenizer)
    ctx.run.mkdir(parents=True, exist_ok=True)
    env, results, failed = offline_env(threads), {}, None
    for stage in STAGES:
        if stage.name not in names:
            continue
        if failed:
            results[stage.name] = {"not_run": f"after {failed} failed"}
            continue
        log = out / "logs" / f"{stage.name}.log"
        try:
            stage.prepare(ctx)
            if stage.name.startswith("search_") and not (ctx.run / "queries.txt").exists():
                write_queries(ctx)
            measured = measure(stage.argv(ctx), log, env=env, cwd=REPO)
        except (StageFailed, OSError) as err:
            print(f"[rehearsal] {stage.name} @{num_passages:,}: FAILED: {err}", file=sys.stderr, flush=True)
            results[stage.name], failed = {"failed": str(err).splitlines()[0]}, stage.name
            continue
        row = measured.to_dict() | {"bound_bytes": stage.bound_bytes(ctx)}
        row["within_bound"] = row["peak_anon_bytes"] <= row["bound_bytes"]
        if stage.name == "train" or stage.name.startswith("index_"):
            row |= builder_phases(ctx.run / "train" / "builder.log" if stage.name == "train" else log)
        results[stage.name] = row
        print(f"[rehearsal] {stage.name} @{num_passages:,}: {row['wall_s']:.1f} s, peak RSS "
              f"{row['peak_rss_bytes'] / 2**30:.2f} GB, anonymous {row['peak_anon_bytes'] / 2**30:.2f} GB (bound "
              f"{row['bound_bytes'] / 2**30:.2f})", flush=True)
    return results


def summarise(sizes: list[int], by_size: dict[int, dict[str, Any]], names: list[str]) -> dict[str, Any]:
    """The JSON: per stage, its runs by N and the growth exponents; the projection from the largest N."""
    stages: dict[str, Any] = {}
    for stage in STAGES:
        if stage.name not in names:
            continue
        runs = {str(n): by_size[n][stage.name] for n in sizes if "wall_s" in by_size[n].get(stage.name, {})}
        entry: dict[str, Any] = {"cost": stage.cost, "shapes": stage.shapes, "runs": runs}
        problems = [by_size[n][stage.name] for n in sizes if "wall_s" not in by_size[n].get(stage.name, {"x": 0})]
        if problems:
            entry["not_run"] = problems[0].get("failed") or problems[0].get("not_run")
        ns = [int(n) for n in runs]
        entry["wall_exponent"] = growth_exponent(ns, [r["wall_s"] for r in runs.values()])
        entry["rss_exponent"] = growth_exponent(ns, [r["peak_rss_bytes"] for r in runs.values()])
        entry["anon_exponent"] = growth_exponent(ns, [r.get("peak_anon_bytes", 0) for r in runs.values()])
        stages[stage.name] = entry
    projection = []
    largest = str(sizes[-1])
    for name, factory in FACTORIES.items():
        run = stages.get(index_run(name), {}).get("runs", {}).get(largest, {})
        if "faiss_s" in run:
            per_block = run["faiss_s"] / sizes[-1]
            projection += [project(g, per_block, factory=factory(sizes[-1]), builder_gpus=b).to_dict()
                           for g, b in PROJECTED_GPUS]  # fmt: skip
    return {"passages": sizes, "stages": stages, "projection": projection, "assumptions": assumptions()}


def merge(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One rehearsal JSON from several (100k, then 1M on the same machine; or some stages of a size run again): each
    stage's runs over the union of their sizes, its exponents fitted over all of them, the projection from the
    largest. Where two JSONs ran the same stage at the same size the later one's run is kept, and the earlier one is
    named on stderr."""
    by_size: dict[int, dict[str, Any]] = {}
    names: list[str] = []
    for k, result in enumerate(results):
        for name, stage in result["stages"].items():
            names += [name] if name not in names else []
            for n in result["passages"]:
                runs, run = by_size.setdefault(n, {}), stage["runs"].get(str(n))
                earlier = runs.get(name, {})
                if run is None:  # note: a stage that failed or did not run keeps any run another JSON has of it
                    runs[name] = earlier if "wall_s" in earlier else {"not_run": stage.get("not_run", "not run")}
                    continue
                if "wall_s" in earlier:
                    print(f"[rehearsal] {name} @{n:,}: the run of JSON {k + 1} ({run['wall_s']:.1f} s) replaces an "
                          f"earlier one ({earlier['wall_s']:.1f} s)", file=sys.stderr)  # fmt: skip
                runs[name] = run
    for runs in by_size.values():  # note: a stage one JSON ran and another did not
        for name in names:
            runs.setdefault(name, {"not_run": "not in this size's JSON"})
    return summarise(sorted(by_size), by_size, names)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", default="100000", help="comma-separated corpus sizes, smallest first")
    parser.add_argument("--out", default="runs/rehearsal", help="work folder (n-N/ per size)")
    parser.add_argument("--json", default=None, help="write the figures here")
    parser.add_argument("--stages", default=",".join(STAGE_NAMES), help=f"a subset of {','.join(STAGE_NAMES)}")
    parser.add_argument("--threads", type=int, default=1, help="OpenMP/MKL threads of each stage's processes")
    parser.add_argument("--table", nargs="+", default=None, metavar="JSON",
                        help="print the markdown tables of rehearsal JSONs (several: merged over their sizes)")
    args = parser.parse_args(argv)
    if args.table:
        results = [json.loads(Path(path).read_text(encoding="utf-8")) for path in args.table]
        result = results[0] if len(results) == 1 else merge(results)
        write_json(args.json, result)
        print(markdown(result))
        return
    sizes = sorted(int(n) for n in args.passages.split(","))
    names = [n for n in args.stages.split(",") if n]
    if unknown := sorted(set(names) - set(STAGE_NAMES)):
        parser.error(f"unknown stage(s) {', '.join(unknown)}; choose from {', '.join(STAGE_NAMES)}")
    tokenizer = str(minilm_path())
    by_size = {n: run_size(n, Path(args.out).resolve() / f"n-{n}", names, args.threads, tokenizer) for n in sizes}
    result = summarise(sizes, by_size, names)
    write_json(args.json, result)
    print(markdown(result))


if __name__ == "__main__":
    main()
