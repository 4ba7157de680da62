"""Open-domain QA metrics with the semantics of ORQA / REALM / DPR (DESIGN.md section 1, "Evaluation semantics").

* ``normalize_answer``: Unicode NFD, then the official SQuAD v1.1 normalisation, in the official order
  ``white_space_fix(remove_articles(remove_punc(lower(s))))``.
* ``exact_match``: normalised string equality, max over the references.
* ``regex_match``: ORQA's CuratedTrec match, ``re.match`` (anchored at the start) with IGNORECASE|UNICODE|MULTILINE.
* ``has_answer``: DPR's top-k retrieval check: an answer's uncased token sequence occurs contiguously in the NFD
  text's token sequence; regex answers use ``re.search`` on the NFD text.
* ``top_k_accuracy``, ``reader_oracle``, ``aggregate``: dataset-level summaries.

All functions are pure and have no dependencies beyond the standard library.
"""

from __future__ import annotations

import functools
import re
import string
import unicodedata
from typing import Sequence

from realm.data.packing import contains_run

__all__ = [
    "normalize_answer",
    "exact_match",
    "regex_match",
    "compile_pattern",
    "simple_tokenize",
    "has_answer",
    "top_k_accuracy",
    "reader_oracle",
    "aggregate",
]

_REGEX_FLAGS = re.IGNORECASE | re.UNICODE | re.MULTILINE
_PUNCTUATION = frozenset(string.punctuation)  # ASCII only: curly quotes, dashes etc. are NOT removed
_ARTICLES = re.compile(r"\b(a|an|the)\b", flags=re.UNICODE)


# --------------------------------------------------------------------------------------------------- normalisation


def _lower(text: str) -> str:
    return text.lower()


def _remove_punc(text: str) -> str:
    return "".join(ch for ch in text if ch not in _PUNCTUATION)


def _remove_articles(text: str) -> str:
    return _ARTICLES.sub(" ", text)


def _white_space_fix(text: str) -> str:
    return " ".join(text.split())


def normalize_answer(s: str) -> str:
    """NFD, then SQuAD v1.1's normalisation: lower-case, drop ASCII punctuation, drop articles, collapse spaces.

    The order is NFD first (as ORQA and DPR do), then exactly the official
    ``white_space_fix(remove_articles(remove_punc(lower(s))))``. Consequences worth knowing:

    * punctuation is removed *before* articles, so ``"U.S."`` becomes ``"us"`` and ``"the-end"`` becomes ``"theend"``;
    * only ``string.punctuation`` (ASCII) is removed: curly quotes, en/em dashes and NFD combining marks stay, so
      ``"café"`` (NFD ``"cafe" + U+0301``) does not equal ``"cafe"``;
    * articles are removed only as whole words (``\\b``), so ``"theater"`` keeps its ``"the"``.
    """
    text = unicodedata.normalize("NFD", s)
    return _white_space_fix(_remove_articles(_remove_punc(_lower(text))))


def exact_match(prediction: str, answers: Sequence[str]) -> bool:
    """Whether the normalised prediction equals any normalised reference (False when there is none)."""
    pred = normalize_answer(prediction)
    return any(pred == normalize_answer(answer) for answer in answers)


# ----------------------------------------------------------------------------------------------------------- regex


@functools.lru_cache(maxsize=65536)
def compile_pattern(pattern: str) -> re.Pattern[str]:
    """An answer regex compiled with ORQA's flags (cached: a pattern is matched against many blocks)."""
    try:
        return re.compile(pattern, flags=_REGEX_FLAGS)
    except re.error as exc:
        raise ValueError(f"invalid answer regular expression {pattern!r}: {exc}") from exc


def regex_match(prediction: str, patterns: Sequence[str]) -> bool:
    """ORQA's CuratedTrec EM: any ``re.match(pattern, prediction)`` with IGNORECASE|UNICODE|MULTILINE.

    ``re.match`` is anchored at the start of the prediction (not at the end: ``"paris"`` matches ``"paris, france"``
    with pattern ``paris``), so a pattern found only in the middle does not count. The prediction is used as given
    (ORQA does not normalise it). An invalid pattern raises ``ValueError`` naming it (ORQA logged and returned False;
    here a broken answer file is an error, not a silent zero).
    """
    return any(compile_pattern(pattern).match(prediction) is not None for pattern in patterns)


# ------------------------------------------------------------------------------------------------------ has_answer


def _is_alnum(ch: str) -> bool:
    """``[\\p{L}\\p{N}\\p{M}]``: letters, numbers and marks (combining accents included)."""
    return unicodedata.category(ch)[0] in "LNM"


def _is_non_ws(ch: str) -> bool:
    """``[^\\p{Z}\\p{C}]``: anything but separators (spaces, line/paragraph separators) and control/format/other."""
    return unicodedata.category(ch)[0] not in "ZC"


def simple_tokenize(text: str, *, uncased: bool = True) -> list[str]:
    """DPR's ``SimpleTokenizer``: tokens are runs of ``[\\p{L}\\p{N}\\p{M}]+`` or single ``[^\\p{Z}\\p{C}]`` chars.

    Python's ``re`` has no ``\\p{..}`` classes and its ``\\w`` excludes combining marks (``[^\\W_]+`` would split
    NFD ``"cafe\\u0301"`` into ``"cafe"`` and ``"\\u0301"``), so this scans characters by Unicode general category
    instead, which reproduces the ``regex``-module pattern exactly: at each position the longest letter/number/mark
    run is one token, otherwise any non-separator, non-control character is a one-character token, and separators
    and control characters (spaces, tabs, newlines) are skipped. Tokens are lower-cased when ``uncased``.
    """
    tokens: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if _is_alnum(ch):
            j = i + 1
            while j < n and _is_alnum(text[j]):
                j += 1
            tokens.append(text[i:j])
            i = j
        else:
            if _is_non_ws(ch):
                tokens.append(ch)
            i += 1
    if uncased:
        tokens = [token.lower() for token in tokens]
    return tokens


def has_answer(text: str, answers: Sequence[str], *, regex: bool = False) -> bool:
    """DPR's top-k retrieval check: does ``text`` (a retrieved block) contain any of ``answers``?

    Plain answers: text and answers are NFD-normalised and tokenised with ``simple_tokenize`` (uncased); an answer
    is present when its token sequence occurs contiguously in the text's tokens, so ``"Barack Obama"`` is found in
    ``"President Barack Obama said"`` but not in ``"barackobama"``, and ``"bar"`` is not found in ``"barack"``.
    An answer that tokenises to nothing never matches.

    Regex answers (``regex=True``, CuratedTrec): ``re.search(pattern, NFD(text))`` with IGNORECASE|UNICODE|MULTILINE,
    i.e. unanchored, unlike ``regex_match``. An invalid pattern raises ``ValueError``.
    """
    if regex:
        text = unicodedata.normalize("NFD", text)
        return any(compile_pattern(pattern).search(text) is not None for pattern in answers)
    text_tokens = nfd_tokens(text)
    return any(contains_run(text_tokens, nfd_tokens(answer)) for answer in answers)


@functools.lru_cache(maxsize=16384)
def nfd_tokens(text: str) -> tuple[str, ...]:
    """``has_answer``'s tokens of a text or answer: NFD-normalised, ``simple_tokenize``d, uncased."""
    # note: cached because fine-tuning checks the same blocks (and answers) against many questions at every step
    return tuple(simple_tokenize(unicodedata.normalize("NFD", text), uncased=True))


# ------------------------------------------------------------------------------------------------------ summaries


def top_k_accuracy(
    has_answer_matrix: Sequence[Sequence[bool]], ks: tuple[int, ...] = (1, 5, 20, 100)
) -> dict[int, float]:
    """Share of questions with an answer in the first ``k`` retrieved blocks, for each ``k`` in ``ks``.

    ``has_answer_matrix[q][r]`` says whether the ``r``-th retrieved block of question ``q`` has an answer (in
    retrieval order). A question with fewer than ``k`` blocks is judged on those it has (as DPR does). An empty
    matrix gives 0.0 for every ``k``.
    """
    for k in ks:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
    n = len(has_answer_matrix)
    if n == 0:
        return {k: 0.0 for k in ks}
    return {k: sum(1 for row in has_answer_matrix if any(row[:k])) / n for k in ks}


def _candidate_spans(text: str, max_span_words: int) -> list[str]:
    words = text.split()
    return [
        " ".join(words[i:j]) for i in range(len(words)) for j in range(i + 1, min(i + max_span_words, len(words)) + 1)
    ]


def reader_oracle(
    blocks_texts: Sequence[Sequence[str]],
    examples_answers: Sequence[Sequence[str]],
    *,
    k: int = 5,
    max_span_words: int = 10,
    regex_flags: Sequence[bool] | None = None,
) -> float:
    """Upper bound for a span reader: share of questions where some span of the top-``k`` blocks is correct.

    ``blocks_texts[q]`` are question ``q``'s retrieved block texts in retrieval order. The candidate spans of a block
    are all runs of 1..``max_span_words`` whitespace-separated words (joined by one space); a span is correct when
    ``exact_match`` (or ``regex_match`` where ``regex_flags[q]``) accepts it against the question's answers. This is
    stricter than ``has_answer`` (spans must equal an answer after normalisation, not merely contain it) and it
    works on whitespace words, not wordpieces, so it approximates the reader's 10-wordpiece span limit.
    """
    if len(blocks_texts) != len(examples_answers):
        raise ValueError(f"{len(blocks_texts)} block lists but {len(examples_answers)} answer lists")
    if regex_flags is not None and len(regex_flags) != len(examples_answers):
        raise ValueError(f"{len(regex_flags)} regex flags but {len(examples_answers)} answer lists")
    if k < 1 or max_span_words < 1:
        raise ValueError(f"k and max_span_words must be >= 1, got {k} and {max_span_words}")
    n = len(examples_answers)
    if n == 0:
        return 0.0
    hits = 0
    for q, (blocks, answers) in enumerate(zip(blocks_texts, examples_answers)):
        use_regex = bool(regex_flags[q]) if regex_flags is not None else False
        if use_regex:
            compiled = [compile_pattern(pattern) for pattern in answers]
            accept = lambda span: any(c.match(span) is not None for c in compiled)  # noqa: E731
        else:
            targets = {normalize_answer(answer) for answer in answers}
            accept = lambda span: normalize_answer(span) in targets  # noqa: E731
        if any(accept(span) for block in blocks[:k] for span in _candidate_spans(block, max_span_words)):
            hits += 1
    return hits / n


def aggregate(
    predictions: Sequence[str], examples_answers: Sequence[Sequence[str]], regex_flags: Sequence[bool]
) -> dict[str, float | int]:
    """Dataset EM: ``{"exact_match": share in [0, 1], "num": number of questions}``.

    Each example is scored with ``regex_match`` when its flag is set (CuratedTrec) and ``exact_match`` otherwise.
    An empty dataset gives ``exact_match`` 0.0.
    """
    if not (len(predictions) == len(examples_answers) == len(regex_flags)):
        raise ValueError(
            f"length mismatch: {len(predictions)} predictions, {len(examples_answers)} answer lists, "
            f"{len(regex_flags)} regex flags"
        )
    n = len(predictions)
    correct = sum(
        1
        for prediction, answers, is_regex in zip(predictions, examples_answers, regex_flags)
        if (regex_match(prediction, answers) if is_regex else exact_match(prediction, answers))
    )
    return {"exact_match": correct / n if n else 0.0, "num": n}
