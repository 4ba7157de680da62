"""The QA task of a fine-tuning or evaluation run: a question format and its files."""

from __future__ import annotations

import typing
from dataclasses import dataclass

from realm.core.checks import Problems
from realm.core.errors import DataFileError
from realm.qa.datasets import Task, load_task
from realm.qa.datasets.common import LoadStats

TASKS: tuple[str, ...] = typing.get_args(Task)


@dataclass(kw_only=True, slots=True)
class TaskConfig:
    """The questions: a task format and files (``hf:<split>`` reads nq_open / web_questions from the hub)."""

    name: str = "nq"
    """``nq``, ``wq``, ``ct`` (regex answers), ``squad``, ``dpr`` (DPR's qas format: NQ and TriviaQA as DPR split
    them) or ``jsonl`` (generic, fields below)."""
    train: str = ""
    dev: str = ""
    """Evaluated at the start, every ``finetune.eval_interval`` steps and at the end (optional)."""
    dev_name: str = ""
    """The dev file's format when it differs from the training file's (e.g. ``dpr`` questions to train on, NQ-open
    dev as ``nq`` to evaluate on); empty: ``name``."""
    question_field: str = "question"
    """``jsonl`` only."""
    answers_field: str = "answers"
    """``jsonl`` only."""
    regex: bool = False
    """``jsonl`` only: the answers are regular expressions."""
    skip_malformed: bool = False
    """Skip (and count) malformed records instead of stopping at the first one."""
    max_dev_questions: int = 0
    """Evaluate on the first N dev questions (0: all)."""

    def __post_init__(self) -> None:
        problems = Problems()
        for key in ("name", "dev_name"):
            value = getattr(self, key)
            if (value or key == "name") and value not in TASKS:
                problems.add(f"task.{key} must be one of {TASKS}, got {value!r}")
        problems.raise_if_any()

    def load(self, path: str, limit: int = 0, *, dev: bool = False):
        """The questions of ``path`` (the first ``limit``; 0: all), read as the dev file's format when ``dev``."""
        name = (self.dev_name or self.name) if dev else self.name
        kw = {"skip_malformed": self.skip_malformed, "stats": LoadStats()}
        if name == "jsonl":
            kw.update(question_field=self.question_field, answers_field=self.answers_field, regex=self.regex)
        examples = load_task(name, path, **kw)
        if not examples:
            raise DataFileError(f"{path}: no questions")
        return examples[:limit] if limit else examples
