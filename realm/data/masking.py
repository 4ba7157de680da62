"""Choosing what to mask in a query sentence: salient spans (REALM), or the paper's random ablations.

All choices are drawn from a ``random.Random`` seeded by (seed, epoch, example index), so a resumed run masks
exactly what an uninterrupted run would have.
"""

from __future__ import annotations

import random
from typing import Literal, Sequence

MaskingMode = Literal["salient", "random_span", "random_token", "gold"]
MASKING_MODES: tuple[str, ...] = ("salient", "random_span", "random_token", "gold")


class MaskingError(ValueError):
    """An example that cannot be masked under the chosen mode."""


def example_rng(seed: int, epoch: int, index: int) -> random.Random:
    # note: str seeds are hashed with SHA-512 by `random`, so this is stable across processes and Python runs.
    return random.Random(f"{seed}/{epoch}/{index}")


def choose_masked_positions(
    num_tokens: int,
    salient_spans: Sequence[Sequence[int]],
    gold_span: Sequence[int] | None,
    mode: MaskingMode,
    rng: random.Random,
    *,
    random_token_prob: float = 0.15,
    max_span_length: int = 5,
) -> list[int]:
    """Wordpiece positions (0-based, within the sentence) to replace by [MASK].

    ``salient`` masks every wordpiece of one salient span chosen at random; ``gold`` masks the gold answer span;
    ``random_span`` masks a random contiguous run of 1..max_span_length wordpieces; ``random_token`` masks each
    wordpiece with ``random_token_prob`` (at least one). Raises ``MaskingError`` when nothing can be masked or a span
    falls outside the sentence, so callers reject the example instead of training on an unmasked one.
    """
    if num_tokens <= 0:
        raise MaskingError("empty sentence")
    if mode == "salient":
        valid = [s for s in salient_spans if 0 <= s[0] < s[1] <= num_tokens]
        if not valid:
            raise MaskingError("no salient span inside the sentence")
        start, end = valid[rng.randrange(len(valid))]
    elif mode == "gold":
        if gold_span is None or not 0 <= gold_span[0] < gold_span[1] <= num_tokens:
            raise MaskingError(f"gold span {gold_span} is not inside the sentence of {num_tokens} wordpieces")
        start, end = gold_span
    elif mode == "random_span":
        length = rng.randint(1, min(max_span_length, num_tokens))
        start = rng.randrange(num_tokens - length + 1)
        end = start + length
    elif mode == "random_token":
        positions = [i for i in range(num_tokens) if rng.random() < random_token_prob]
        return positions or [rng.randrange(num_tokens)]
    else:
        raise ValueError(f"unknown masking mode {mode!r}; choose one of {MASKING_MODES}")
    return list(range(start, end))
