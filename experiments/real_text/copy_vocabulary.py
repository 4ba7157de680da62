"""When does a from-scratch encoder learn to copy? The reader warm-up's task with nothing to learn but copying: blocks
of one "sentence" of 4-6 random words, the query being that same sentence with random wordpieces masked, over a word
list of N frequent single-wordpiece words of a corpus (``experiments/real_text/RESULTS.md``).

    python -m experiments.real_text.copy_vocabulary --tokenizer RUN/tokenizer --blocks RUN/blocks [--words 200 3000] [--steps 500]
                                    [--chain]

For each N: one stage of the pipeline's copy curriculum (``realm.pipeline.warm_start.copy_curriculum``: a 20,000-block
corpus over the N most frequent single-wordpiece words of the blocks, then ``realm warmup --task.masking=random_token``
with ``configs/real_text/warmup/default.yaml`` at query length 24 and block length 32), from scratch, or with
``--chain`` each from the previous one's encoder; prints the masked-token and span accuracy every 100 steps. On the
Vital corpus's vocabulary from scratch: N = 200 copies (0.98 at step 500), N = 3,000 does not yet (0.18). About a
minute per N on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.harness import REPO  # noqa: E402 isort:skip  (first: no hub, no W&B)

from realm.core.logging import init_logging  # noqa: E402
from realm.pipeline import layout  # noqa: E402
from realm.pipeline.warm_start import CopyStage, WarmStartConfig, copy_curriculum  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", required=True, help="the vocabulary (e.g. a realm real-text run's tokenizer/)")
    parser.add_argument("--blocks", required=True, help="blocks of the corpus the words are drawn from")
    parser.add_argument("--words", type=int, nargs="+", default=[200, 3000], help="word-list sizes (0: all words)")
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--chain", action="store_true",
                        help="run the sizes as one curriculum, each from the previous encoder (the pipeline's stage)")
    parser.add_argument("--work", default="runs/copy_vocabulary")
    args = parser.parse_args(argv)
    init_logging()
    work = Path(args.work)
    data = {"tokenizer": args.tokenizer, "blocks": args.blocks}
    stages = [CopyStage(words=count, steps=args.steps) for count in args.words]
    config = str(REPO / "configs/real_text/warmup/default.yaml")
    if args.chain:
        copy_curriculum(WarmStartConfig(warmup_config=config, copy_curriculum=stages), work, 0, data, {})
    else:  # each size from scratch, in a folder of its own
        for stage in stages:
            one = WarmStartConfig(warmup_config=config, copy_curriculum=[stage])
            copy_curriculum(one, work / f"scratch_{stage.words}", 0, data, {})
    runs = sorted(layout.copy_dir(work).glob("*/metrics.jsonl")) if args.chain else [
        next(layout.copy_dir(work / f"scratch_{stage.words}").glob("*/metrics.jsonl")) for stage in stages]  # fmt: skip
    rows = {}
    for stage, metrics in zip(stages, runs):
        records = [json.loads(line) for line in metrics.read_text().splitlines()]
        rows[stage.words or "all"] = [(r["step"], r["warmup/mlm_accuracy"], r["warmup/span_accuracy"])
                                      for r in records if "warmup/mlm_accuracy" in r]  # fmt: skip
    first = next(iter(rows.values()))
    print("| words | " + " | ".join(f"step {step}" for step, _, _ in first) + " |")
    print("|---|" + "---|" * len(first))
    for count, curve in rows.items():
        print(f"| {count} | " + " | ".join(f"{token:.3f} ({span:.3f})" for _, token, span in curve) + " |")
    print("cells: masked-token accuracy (span accuracy) of the last 100 steps"
          + (", each size from the previous size's encoder" if args.chain else ", each size from scratch"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
