"""Questions as cloze: an open-domain question followed by its answer, the answer masked, read zero-shot by a
pre-trained REALM model with retrieval and closed book (``realm.pretrain.heldout_eval``), no QA fine-tuning.

An item's ``text`` is the question (a "?" added when it has none) then one answer, and ``answer_start``/``answer_end``
mark that answer, so the held-out evaluation masks every wordpiece of it: as many masks as the answer has wordpieces.
Span accuracy then asks for that one answer string exactly (the other reference answers are not tried).

Two subsets, named as what they measure on the corpus at hand, neither a claim that the question is answerable:

- **linked** ("linked-answerable"): the question names an article's title (``TitleLinker``, loose rule: questions
  are lower-cased) and one of its answers occurs in that article's lead block. The item's answer is that one, its
  ``entity`` the article (so the evaluation's gold recall is the crude linker's article). Answers that are the title
  itself are not used (they are in the question).
- **string** ("string-answerable"): one of the answers occurs on word boundaries somewhere in the corpus (the first
  such answer in the reference order). This is what the real-text runs called "answerable"; a median NQ answer of the
  kind occurs in many articles, so it bounds reachability from above and says little about retrieval.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

from experiments.common.title_links import Article, CorpusText, TitleLinker, names_title
from realm.core.atomic import write_text_atomic

LINKED, STRING = "linked", "string"


class Question(Protocol):
    """A question with its reference answers (``realm.qa.datasets.QAExample`` is one)."""

    question: str
    answers: list[str]
    id: str


@dataclass(frozen=True, slots=True)
class QuestionCloze:
    """What ``write_question_cloze`` wrote for one question set."""

    linked: Path
    string: Path
    num_questions: int
    num_linked: int
    num_string: int


def cloze_text(question: str, answer: str) -> tuple[str, int, int]:
    """(text, answer start, answer end): the question, a "?" where it ends without one, a space, the answer."""
    question = question.strip()
    prefix = question if question.endswith("?") else f"{question}?"
    return f"{prefix} {answer}", len(prefix) + 1, len(prefix) + 1 + len(answer)


def _item(example: Question, answer: str, subset: str, entity: str = "", gold: Sequence[str] = ()) -> dict:
    text, start, end = cloze_text(example.question, answer)
    return {"text": text, "source_uid": "", "answer_start": start, "answer_end": end, "title": "", "label": "ANSWER",
            "entity": entity, "gold_titles": list(gold), "subset": subset, "question": example.question,
            "answers": list(example.answers), "id": example.id}  # fmt: skip


def linked_item(example: Question, articles: dict[str, Article], linker: TitleLinker) -> dict | None:
    """The linked-answerable item of ``example``, or None: the first answer (reference order) that occurs in the lead
    block of an article the question names, that article as ``entity`` (the first by title), every such article in
    ``gold_titles``."""
    keys = sorted({key for _, _, key in linker.mentions(example.question)})
    for answer in example.answers:
        answer = re.sub(r"\s+", " ", answer).strip()
        gold = sorted(articles[k].title for k in keys
                      if not names_title(answer, articles[k].title) and articles[k].in_lead(answer))  # fmt: skip
        if answer and gold:
            return _item(example, answer, LINKED, gold[0], gold)
    return None


def string_item(example: Question, corpus: CorpusText) -> dict | None:
    """The string-answerable item of ``example`` (its first answer found anywhere in the corpus), or None."""
    for answer in example.answers:
        answer = re.sub(r"\s+", " ", answer).strip()
        if answer and corpus.contains(answer):
            return _item(example, answer, STRING)
    return None


def question_cloze_items(
    examples: Sequence[Question], articles: dict[str, Article], *, min_title_chars: int = 3
) -> tuple[list[dict], list[dict]]:
    """(linked items, string items) of ``examples`` over the corpus's ``articles`` (``corpus_articles``)."""
    linker = TitleLinker(articles, loose=True, min_title_chars=min_title_chars)
    corpus = CorpusText(articles)
    linked = [item for ex in examples if (item := linked_item(ex, articles, linker)) is not None]
    string = [item for ex in examples if (item := string_item(ex, corpus)) is not None]
    return linked, string


def write_question_cloze(
    examples: Sequence[Question], articles: dict[str, Article], out_dir: str | Path, name: str
) -> QuestionCloze:
    """Writes ``{name}_linked.jsonl`` and ``{name}_string.jsonl`` into ``out_dir``, in the held-out cloze schema
    (``text``, ``source_uid`` "", ``answer_start``, ``answer_end``, ``title``, ``label``, ``entity``) plus
    ``gold_titles``, ``subset``, ``question``, ``answers`` and ``id``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    linked, string = question_cloze_items(examples, articles)
    paths = out / f"{name}_{LINKED}.jsonl", out / f"{name}_{STRING}.jsonl"
    for path, rows in zip(paths, (linked, string)):
        write_text_atomic(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    return QuestionCloze(linked=paths[0], string=paths[1], num_questions=len(examples), num_linked=len(linked),
                         num_string=len(string))  # fmt: skip
