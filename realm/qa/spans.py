"""Answer spans inside reader inputs: which spans may be predicted, which are correct, and their text.

A reader input is ``[CLS] question [SEP] body [SEP]``; body wordpieces carry token type 1. A candidate span lies in
the body, is at most ``max_span_width`` wordpieces long, and starts and ends on word boundaries (it neither starts
with nor is followed by a ``##`` continuation piece), so every prediction decodes to whole words.

Correct spans (ORQA/REALM): for plain answers, the answer's own wordpieces occurring in the body; for regular-
expression answers (CuratedTrec), the matches of ``re.finditer`` in the body's text, kept when they begin and end
on wordpiece boundaries.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import PreTrainedTokenizerBase

from realm.qa.metrics import compile_pattern

CONTINUATION_PREFIX = "##"


class Wordpieces:
    """What the span logic needs from a WordPiece tokenizer, computed once: continuation flags and piece strings."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.tokenizer = tokenizer
        self.pieces: list[str] = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        self.continuation = torch.tensor([p.startswith(CONTINUATION_PREFIX) for p in self.pieces], dtype=torch.bool)
        self.sep_id = tokenizer.sep_token_id

    def body_text(self, ids: Sequence[int]) -> tuple[str, list[int], list[int]]:
        """Detokenised text of body wordpieces with each piece's [start, end) character offsets."""
        parts: list[str] = []
        starts, ends = [], []
        length = 0
        for i, token_id in enumerate(ids):
            piece = self.pieces[token_id]
            if piece.startswith(CONTINUATION_PREFIX):
                piece = piece[len(CONTINUATION_PREFIX) :]
            elif i > 0:
                parts.append(" ")
                length += 1
            starts.append(length)
            parts.append(piece)
            length += len(piece)
            ends.append(length)
        return "".join(parts), starts, ends

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True, clean_up_tokenization_spaces=True).strip()


def body_mask(input_ids: Tensor, token_type_ids: Tensor, sep_id: int) -> Tensor:
    """[N, L] True at body wordpieces (token type 1, not the closing [SEP])."""
    return (token_type_ids == 1) & (input_ids != sep_id)


def candidate_span_mask(input_ids: Tensor, token_type_ids: Tensor, words: Wordpieces, max_span_width: int) -> Tensor:
    """[N, L] reader inputs -> [N, L, W] bool: True where the span from i to i + w may be predicted."""
    in_body = body_mask(input_ids, token_type_ids, words.sep_id)
    continuation = words.continuation.to(input_ids.device)[input_ids] & in_body
    starts_ok = in_body & ~continuation
    next_is_continuation = F.pad(continuation[:, 1:], (0, 1), value=False)
    ends_ok = in_body & ~next_is_continuation
    # ends_ok_at[n, i, w] = ends_ok[n, i + w]; the body is contiguous, so a start and an end inside it suffice
    ends_ok_at = F.pad(ends_ok, (0, max_span_width - 1), value=False).unfold(1, max_span_width, 1)
    return starts_ok.unsqueeze(-1) & ends_ok_at


def _text_answer_spans(ids: Sequence[int], start: int, end: int, answer_ids: Sequence[Sequence[int]], width: int):
    """(position, width - 1) of each occurrence of an answer's wordpieces in ``ids[start:end]``."""
    for answer in answer_ids:
        n = len(answer)
        if not 0 < n <= width:
            continue
        first = answer[0]
        for p in range(start, end - n + 1):
            if ids[p] == first and list(ids[p : p + n]) == list(answer):
                yield p, n - 1


def _regex_answer_spans(ids: Sequence[int], start: int, end: int, patterns: Sequence[str], width: int, words):
    """(position, width - 1) of each regex match in the body's text that begins and ends on wordpiece bounds."""
    text, starts, ends = words.body_text(ids[start:end])
    by_start = {s: i for i, s in enumerate(starts)}
    by_end = {e: i for i, e in enumerate(ends)}
    for pattern in patterns:
        for match in compile_pattern(pattern).finditer(text):
            span = match.group(0)
            lo = match.start() + len(span) - len(span.lstrip())
            hi = match.end() - (len(span) - len(span.rstrip()))
            if hi > lo and lo in by_start and hi in by_end and 0 <= by_end[hi] - by_start[lo] < width:
                yield start + by_start[lo], by_end[hi] - by_start[lo]


def correct_span_mask(
    input_ids: Tensor,
    token_type_ids: Tensor,
    answers: Sequence[Sequence[str] | Sequence[Sequence[int]]],
    is_regex: Sequence[bool],
    words: Wordpieces,
    max_span_width: int,
    candidates: Tensor | None = None,
) -> Tensor:
    """[N, L] reader inputs -> [N, L, W] bool: True at the correct spans of each row (always candidate spans).

    Args:
        answers: Per row, the answers' wordpiece ids (plain answers) or the patterns (rows with ``is_regex``).
        is_regex: Per row, whether its answers are regular expressions.
        candidates: ``candidate_span_mask`` of the same inputs, when the caller has it already.
    """
    n_rows, length = input_ids.shape
    out = torch.zeros(n_rows, length, max_span_width, dtype=torch.bool)
    in_body = body_mask(input_ids, token_type_ids, words.sep_id).cpu()
    ids_rows = input_ids.cpu().tolist()
    for row, (ids, row_answers, regex) in enumerate(zip(ids_rows, answers, is_regex)):
        positions = in_body[row].nonzero().flatten()
        if len(positions) == 0:
            continue
        start, end = int(positions[0]), int(positions[-1]) + 1
        if regex:
            spans = _regex_answer_spans(ids, start, end, row_answers, max_span_width, words)
        else:
            spans = _text_answer_spans(ids, start, end, row_answers, max_span_width)
        for p, w in spans:
            out[row, p, w] = True
    if candidates is None:
        candidates = candidate_span_mask(input_ids, token_type_ids, words, max_span_width)
    return out & candidates.cpu()
