"""SQuAD v1.1 json: questions plus the paragraphs as a small corpus ``{"id": "{title}#{i}", "title", "text"}``.

The file is one JSON object, so errors name the record's JSON path instead of a line.
"""

from __future__ import annotations

import json
from pathlib import Path

from realm.core.errors import DataFileError
from realm.data.malformed import existing_file, reject, report
from realm.qa.datasets.common import LoadStats, QAExample, _check_question

__all__ = ["load_squad"]


def load_squad(
    path: str | Path, *, skip_malformed: bool = False, stats: LoadStats | None = None
) -> tuple[list[QAExample], list[dict]]:
    """SQuAD v1.1 json: the questions, and the paragraphs as a corpus ``{"id", "title", "text"}``.

    Paragraph ids are ``{title}#{i}`` (the raw article title, i counting that title's paragraphs from 0); the corpus
    title has underscores turned into spaces. Each question keeps SQuAD's id in ``id`` and its paragraph's id in
    ``paragraph_id``. The file is one JSON object, so errors name the record's JSON path rather than a line.
    """
    path = existing_file(path, "QA data")
    stats = stats if stats is not None else LoadStats()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise DataFileError(f"{path}:{err.lineno}: invalid JSON ({err.msg}, column {err.colno})") from err
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise DataFileError(f"{path}:1: expected a SQuAD object with a 'data' list of articles")
    examples: list[QAExample] = []
    paragraphs: list[dict] = []
    next_index: dict[str, int] = {}
    for a, article in enumerate(data["data"]):
        where_article = f"{path}: data[{a}]"
        if not isinstance(article, dict) or not isinstance(article.get("title"), str):
            raise DataFileError(f"{where_article}: expected an article with a string 'title'")
        if not isinstance(article.get("paragraphs"), list):
            raise DataFileError(f"{where_article}: expected a 'paragraphs' list")
        title = article["title"]
        for p, paragraph in enumerate(article["paragraphs"]):
            where_paragraph = f"{where_article}.paragraphs[{p}]"
            if (
                not isinstance(paragraph, dict)
                or not isinstance(paragraph.get("context"), str)
                or not isinstance(paragraph.get("qas"), list)
            ):
                reject(where_paragraph, "expected a string 'context' and a 'qas' list", skip_malformed, stats)
                continue
            index = next_index.get(title, 0)
            next_index[title] = index + 1
            paragraph_id = f"{title}#{index}"
            paragraphs.append({"id": paragraph_id, "title": title.replace("_", " "), "text": paragraph["context"]})
            for q, qa in enumerate(paragraph["qas"]):
                where = f"{where_paragraph}.qas[{q}]"
                if not isinstance(qa, dict) or not all(key in qa for key in ("question", "answers", "id")):
                    reject(where, "expected an object with question, answers and id", skip_malformed, stats)
                    continue
                reason = _check_question(qa["question"])
                answers = qa["answers"]
                if reason is None and not (
                    isinstance(answers, list)
                    and answers
                    and all(isinstance(ans, dict) and isinstance(ans.get("text"), str) for ans in answers)
                ):
                    reason = "answers must be a non-empty list of {'text': str, 'answer_start': int}"
                if reason is not None:
                    reject(where, reason, skip_malformed, stats)
                    continue
                texts = [ans["text"] for ans in answers]
                examples.append(QAExample(qa["question"], texts, False, str(qa["id"]), paragraph_id))
                stats.num_records += 1
    report(path, stats, "questions")
    return examples, paragraphs
