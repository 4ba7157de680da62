"""CuratedTrec: DrQA txt (jsonl whose answers are regular expressions), brmson tsv ``id  type  question  regex``.

The brmson tsv has no header. Regex answers are checked with ``re.compile`` and marked ``answers_are_regex=True``.
"""

from __future__ import annotations

from pathlib import Path

from realm.qa.datasets.common import LoadStats, QAExample
from realm.qa.datasets.generic import load_qa_jsonl, load_qa_tsv

__all__ = ["load_curatedtrec_drqa", "load_curatedtrec_tsv"]


def load_curatedtrec_drqa(
    path: str | Path, *, skip_malformed: bool = False, stats: LoadStats | None = None
) -> list[QAExample]:
    """DrQA's ``CuratedTrec-*.txt``: ``{"question", "answer": [regex]}`` per line (test: 694); regexes are checked."""
    return load_qa_jsonl(path, "question", "answer", regex=True, skip_malformed=skip_malformed, stats=stats)


def load_curatedtrec_tsv(
    path: str | Path, *, skip_malformed: bool = False, stats: LoadStats | None = None
) -> list[QAExample]:
    """brmson's dataset-factoid-curated tsv, no header: ``id  type  question  answer-regex``.

    ``large2180-test.tsv`` is the 694-question test set DrQA/DPR use; ``curated-test.tsv`` is brmson's different
    hand-curated v2 test split (430 questions). The id column becomes ``QAExample.id``.
    """
    return load_qa_tsv(
        path, 2, 3, regex=True, id_col=0, answers_format="string", skip_malformed=skip_malformed, stats=stats
    )
