"""Questions as cloze (issue 55 item 2c): NQ-open, TriviaQA and WebQuestions questions followed by their masked answer,
counted on a corpus as the linked-answerable and string-answerable subsets and, with ``--run``, read zero-shot by a
pre-trained run with retrieval and closed book.

    python -m experiments.real_text.question_cloze --corpus ../shared/data/real/wikipedia_vital10k/summaries_en-us.json \\
        --out runs/question_cloze [--run RUN] [--json F]

Question sets (``--sets NAME=TASK:PATH ...``; default the three below, from ../shared/data/real): ``nq`` NQ-open dev
(3,610), ``trivia`` TriviaQA unfiltered dev as DPR splits it (``topics.dpr.trivia.test.txt``, 11,313), ``wq``
WebQuestions test (2,032). ``experiments.real_text.question_items`` says what each subset means; a question's answer is
masked with as many masks as it has wordpieces. ``--corpus``/``--blocks`` as in ``experiments/common/cloze_eval.py``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.harness import REPO, write_json  # noqa: E402 isort:skip  (first: no hub, no W&B)

from experiments.common.cloze_eval import (  # noqa: E402
    add_corpus_arguments, corpus_blocks, evaluate_cloze, print_evaluation,
)

from realm.core.logging import init_logging  # noqa: E402
from experiments.real_text.question_items import LINKED, STRING, write_question_cloze  # noqa: E402
from experiments.common.title_links import corpus_articles  # noqa: E402
from realm.qa.datasets import load_task  # noqa: E402

REAL = REPO.parent / "shared" / "data" / "real"
DEFAULT_SETS = [
    f"nq=nq:{REAL / 'nq_open' / 'NQ-open.dev.jsonl'}",
    f"trivia=dpr:{REAL / 'dpr_qas' / 'topics.dpr.trivia.test.txt'}",
    f"wq=wq:{REAL / 'webquestions' / 'WebQuestions-test.txt'}",
]


def parse_set(spec: str) -> tuple[str, str, str]:
    """``NAME=TASK:PATH`` -> (name, task, path)."""
    name, _, rest = spec.partition("=")
    task, _, path = rest.partition(":")
    if not (name and task and path):
        raise SystemExit(f"--sets: expected NAME=TASK:PATH (e.g. nq=nq:NQ-open.dev.jsonl), got {spec!r}")
    return name, task, path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_corpus_arguments(parser)
    parser.add_argument("--out", required=True)
    parser.add_argument("--sets", nargs="+", default=DEFAULT_SETS, help="NAME=TASK:PATH (TASK: nq, dpr, wq, ...)")
    parser.add_argument("--run", default=None, help="a pre-trained run to evaluate on every subset")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    init_logging()
    out = Path(args.out)
    articles = corpus_articles(corpus_blocks(args, out))
    result: dict = {"articles": len(articles), "sets": {}}
    files = {}
    print("| questions | asked | linked-answerable | string-answerable |")
    print("|---|---|---|---|")
    for name, task, path in map(parse_set, args.sets):
        if not Path(path).is_file():
            print(f"| {name} | (no file {path}) | - | - |")
            continue
        made = write_question_cloze(load_task(task, path), articles, out, name)
        result["sets"][name] = {"questions": made.num_questions, LINKED: made.num_linked, STRING: made.num_string}
        files |= {f"{name} {LINKED}": made.linked, f"{name} {STRING}": made.string}
        print(f"| {name} | {made.num_questions} | {made.num_linked} ({made.num_linked / made.num_questions:.3f}) "
              f"| {made.num_string} ({made.num_string / made.num_questions:.3f}) |")  # fmt: skip
    if args.run:
        result["evaluation"] = evaluate_cloze(Path(args.run), files)
        print_evaluation(result["evaluation"])
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
