"""A generated DPR-format corpus for the scale rehearsal (``experiments/full_scale/rehearsal.py``):
``id<TAB>text<TAB>title`` rows as in ``psgs_w100.tsv``, written row by row (never held whole in memory) and the same
bytes for the same arguments.

Generated, not the Vital text repeated: a repeated text would make every block's wordpieces, sentences and salient
spans recur ``N / 10k`` times, which flatters what the tagger, the cloze sets and FAISS's clustering see. Each passage
is about one block (DPR cuts Wikipedia into 100-word passages) in sentences that carry what the rule tagger
(``realm.data.tagging``, ``kind: rule``) finds: capitalised names and four-digit years. Words are drawn from a fixed
list of made-up syllable words, so the BERT tokenizer splits them into a realistic 1-3 wordpieces each. Passages
come ``passages_per_article`` to an article, and every article has its own title (``Title N``: distinct titles, so
the held-out split by title groups an article's passages as it does on DPR's file).

    python -m experiments.full_scale.rehearsal_corpus --passages 100000 --out corpus.tsv
"""

from __future__ import annotations

import argparse
import csv
import os
import random
from dataclasses import dataclass
from pathlib import Path

SYLLABLES = ("ka", "ro", "ten", "vi", "lor", "mas", "dun", "el", "qui", "bra", "sto", "na", "pel", "ur", "zan", "ho")
FUNCTION_WORDS = ("the", "of", "and", "in", "was", "is", "a", "to", "by", "for", "with", "from", "as", "on", "at")


@dataclass(kw_only=True, slots=True)
class CorpusShape:
    """What the generated corpus looks like."""

    num_passages: int
    """Rows of the file (DPR's Wikipedia: 21,015,324)."""
    passages_per_article: int = 3
    """Consecutive passages that share a title (DPR's Wikipedia: ~6.4 passages an article on average)."""
    words_per_passage: int = 75
    """Words of a passage. DPR's are 100 words, ~130 BERT wordpieces, one 288-wordpiece block each; the made-up
    words split into more wordpieces, and 75 of them keep to about one block a passage."""
    vocabulary_size: int = 20000
    """Distinct made-up content words."""
    seed: int = 0
    """Seed of the word list and of every passage."""

    def __post_init__(self) -> None:
        for name in ("num_passages", "passages_per_article", "words_per_passage", "vocabulary_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


def _words(rng: random.Random, count: int) -> list[str]:
    return ["".join(rng.choices(SYLLABLES, k=rng.randint(1, 4))) for _ in range(count)]


def _passage(rng: random.Random, words: list[str], names: list[str], num_words: int) -> str:
    """About ``num_words`` words in sentences of 8-20, each with a capitalised name pair and most with a year."""
    sentences, total = [], 0
    while total < num_words:
        length = min(rng.randint(8, 20), max(num_words - total, 4))
        body = rng.choices(words, k=length - 3) + rng.choices(FUNCTION_WORDS, k=1)
        rng.shuffle(body)
        name = f"{rng.choice(names).capitalize()} {rng.choice(names).capitalize()}"
        year = f" in {rng.randint(1000, 2024)}" if rng.random() < 0.7 else ""
        sentences.append(f"{name} {' '.join(body)}{year}.")
        total += length
    return " ".join(sentences)


def write_corpus(path: str | Path, shape: CorpusShape) -> Path:
    """Writes the corpus to ``path`` (a temporary name renamed when complete) and returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(shape.seed)
    words = _words(rng, shape.vocabulary_size)
    names = _words(rng, max(shape.vocabulary_size // 10, 1))
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8", newline="") as out:
        # note: DPR's own quoting (csv, tab-separated, quotes doubled); our texts hold no tab, quote or newline
        writer = csv.writer(out, delimiter="\t", lineterminator="\n")
        writer.writerow(["id", "text", "title"])
        for i in range(shape.num_passages):
            article = i // shape.passages_per_article
            title = f"{names[article % len(names)].capitalize()} {article}"
            writer.writerow([str(i + 1), _passage(rng, words, names, shape.words_per_passage), title])
    os.replace(tmp, path)
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--passages-per-article", type=int, default=3)
    args = parser.parse_args(argv)
    shape = CorpusShape(num_passages=args.passages, seed=args.seed, passages_per_article=args.passages_per_article)
    print(write_corpus(args.out, shape))


if __name__ == "__main__":
    main()
