"""Copy-only corpora: blocks of one "sentence" of random words, for teaching a from-scratch encoder to copy.

On real text a from-scratch reader never learns to copy what it reads: most salient wordpieces are rare, and copying
appears only once each token's embedding has been trained often enough (``experiments/real_text/RESULTS.md``). The copy
curriculum (``realm.pipeline.warm_start``) first teaches copying on these corpora, over a word list that grows (the 200
most frequent single-wordpiece words of the corpus, then 3,000, then all): the query is a block's own sentence with
random wordpieces masked, so copying is the only signal, and a small vocabulary makes it appear within a few hundred
steps.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Iterable

PUNCTUATION = ".,;:()\"'"


def frequent_words(texts: Iterable[str], tokenizer, count: int) -> list[str]:
    """The ``count`` most frequent words of ``texts`` (lower-cased, punctuation stripped) that are one wordpiece of
    ``tokenizer``, most frequent first (ties in first-seen order); ``count == 0``: all of them."""
    if count < 0:
        raise ValueError(f"count must be >= 0 (0: all words), got {count}")
    counts = Counter(w.strip(PUNCTUATION).lower() for text in texts for w in text.split())
    words = []
    for word, _ in counts.most_common():
        if word and len(tokenizer.tokenize(word)) == 1:
            words.append(word)
            if len(words) == count:
                return words
    if count and len(words) < count:
        raise ValueError(f"only {len(words)} single-wordpiece words in the corpus, asked for {count}")
    return words


def write_copy_corpus(words: list[str], path: Path, num_blocks: int = 20000, seed: int = 0, sentences: int = 1
                      ) -> Path:  # fmt: skip
    """A jsonl corpus of ``num_blocks`` documents (``id``, ``title``, ``text``), each ``sentences`` sentences of 4-6
    words drawn uniformly from ``words`` (seeded: the same file for the same arguments). Several sentences a block
    make the reader find the query's sentence among others, at block lengths like real text's."""
    if not words:
        raise ValueError("a copy corpus needs at least one word")
    if sentences < 1:
        raise ValueError(f"sentences must be >= 1, got {sentences}")
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for i in range(num_blocks):
            text = " ".join(" ".join(rng.choice(words) for _ in range(rng.randint(4, 6))) + "."
                            for _ in range(sentences))  # fmt: skip
            handle.write(json.dumps({"id": str(i), "title": "x", "text": text}) + "\n")
    return path
