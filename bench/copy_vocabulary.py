"""When does a from-scratch encoder learn to copy? The reader warm-up's task with nothing to learn but copying: blocks
of one "sentence" of 4-6 random words, the query being that same sentence with random wordpieces masked, over a word
list of N frequent single-wordpiece words of a corpus (``docs/real_text.md``).

    python bench/copy_vocabulary.py --tokenizer RUN/tokenizer --blocks RUN/blocks [--words 200 3000] [--steps 500]

For each N: a 20,000-block corpus (``make_corpus``), its blocks (``realm.data.blocks``), then ``realm warmup
--task.masking=random_token`` with ``configs/real_text/warmup/default.yaml`` at query length 24 and block length 32;
prints the masked-token and span accuracy every 100 steps. On the Vital corpus's vocabulary: N = 200 copies (0.98 at
step 500), N = 3,000 does not yet (0.18). About a minute per N on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from pathlib import Path

from offline import REPO  # noqa: E402 isort:skip  (first: no hub, no W&B network, repository importable)

from realm.core.config import load_config  # noqa: E402
from realm.core.logging import init_logging  # noqa: E402
from realm.data.blocks import build_blocks_from_config, load_blocks  # noqa: E402
from realm.data.corpus import CorpusConfig  # noqa: E402
from realm.data.vocab import load_tokenizer  # noqa: E402
from warmstart.reader import WarmupConfig, train_warmup  # noqa: E402


def frequent_words(texts: list[str], tokenizer, count: int) -> list[str]:
    """The ``count`` most frequent words of ``texts`` (lower-cased, punctuation stripped) that are one wordpiece."""
    counts = Counter(w.strip(".,;:()\"'").lower() for text in texts for w in text.split())
    words = [w for w, _ in counts.most_common() if w and len(tokenizer.tokenize(w)) == 1]
    if len(words) < count:
        raise SystemExit(f"only {len(words)} single-wordpiece words in the corpus, asked for {count}")
    return words[:count]


def make_corpus(words: list[str], path: Path, num_blocks: int = 20000, seed: int = 0) -> Path:
    """A jsonl corpus of ``num_blocks`` documents, each one sentence of 4-6 words drawn uniformly from ``words``."""
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as handle:
        for i in range(num_blocks):
            text = " ".join(rng.choice(words) for _ in range(rng.randint(4, 6))) + "."
            handle.write(json.dumps({"id": str(i), "title": "x", "text": text}) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", required=True, help="the vocabulary (e.g. a realm real-text run's tokenizer/)")
    parser.add_argument("--blocks", required=True, help="blocks of the corpus the words are drawn from")
    parser.add_argument("--words", type=int, nargs="+", default=[200, 3000])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--work", default="runs/copy_vocabulary")
    args = parser.parse_args(argv)
    init_logging()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    tokenizer = load_tokenizer(args.tokenizer)
    texts = load_blocks(args.blocks)["text"][:3000]
    rows = {}
    for count in args.words:
        corpus = make_corpus(frequent_words(texts, tokenizer, count), work / f"corpus_{count}.jsonl")
        blocks = build_blocks_from_config(CorpusConfig(path=str(corpus), max_block_length=32, max_title_length=4),
                                          tokenizer, work / f"blocks_{count}")  # fmt: skip
        run = work / f"warmup_{count}"
        cfg = load_config(WarmupConfig, REPO / "configs/real_text/warmup/default.yaml", {
            "train": {"run_dir": str(run), "max_steps": args.steps},
            "data": {"tokenizer": args.tokenizer, "blocks": str(blocks)}, "task": {"masking": "random_token"},
            "retriever": {"max_query_length": 24, "max_block_length": 32}, "optim": {"decay_steps": 100}})  # fmt: skip
        train_warmup(cfg)
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        rows[count] = [(r["step"], r["warmup/mlm_accuracy"], r["warmup/span_accuracy"])
                       for r in records if "warmup/mlm_accuracy" in r]  # fmt: skip
    print("| words | " + " | ".join(f"step {step}" for step, _, _ in rows[args.words[0]]) + " |")
    print("|---|" + "---|" * len(rows[args.words[0]]))
    for count, curve in rows.items():
        print(f"| {count} | " + " | ".join(f"{token:.3f} ({span:.3f})" for _, token, span in curve) + " |")
    print("cells: masked-token accuracy (span accuracy) of the last 100 steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
