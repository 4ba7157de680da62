"""``experiments/squad_open/squad_open.py``'s data: the questions and paragraphs of SQuAD v1.1 dev as a corpus, an
encoder's blocks of it with X (the blocks' sentences), and the fine-tuning / evaluation split of the questions by
article."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from transformers import PreTrainedTokenizerBase

from realm.data.blocks import build_blocks_from_config, load_blocks
from realm.data.corpus import CorpusConfig
from realm.data.sentences import split_sentences
from realm.qa.datasets import QAExample, load_squad


@dataclass
class Squad:
    """SQuAD v1.1 dev (or its first articles): the questions, the paragraphs and the corpus file of the paragraphs."""

    questions: list[QAExample]
    paragraphs: list[dict]
    """``{"id": "{title}#{i}", "title", "text"}`` in file order; the index in this list is the paragraph number."""
    corpus: Path

    @property
    def texts(self) -> list[str]:
        return [p["text"] for p in self.paragraphs]


def article_of(paragraph_id: str) -> str:
    """The article title (as in the file, with underscores) of a ``{title}#{i}`` paragraph id."""
    return paragraph_id.rsplit("#", 1)[0]


def prepare_data(squad_path: Path, out: Path, num_articles: int = 0) -> Squad:
    """Questions and paragraphs of SQuAD v1.1 dev (the first ``num_articles`` articles, 0: all), and the paragraphs
    as a ``realm blocks`` jsonl corpus."""
    questions, paragraphs = load_squad(squad_path)
    if num_articles:
        kept = set(list(dict.fromkeys(article_of(p["id"]) for p in paragraphs))[:num_articles])
        paragraphs = [p for p in paragraphs if article_of(p["id"]) in kept]
        questions = [q for q in questions if article_of(q.paragraph_id) in kept]
    out.mkdir(parents=True, exist_ok=True)
    corpus = out / "corpus.jsonl"
    with corpus.open("w", encoding="utf-8") as handle:
        for paragraph in paragraphs:
            handle.write(json.dumps(paragraph, ensure_ascii=False) + "\n")
    return Squad(questions, paragraphs, corpus)


def write_qa_split(squad: Squad, out: Path, seed: int, train_fraction: float = 2 / 3) -> dict:
    """Generic QA jsonl files ``{"question", "answers", "id"}``: the questions of ``train_fraction`` of the articles
    (chosen by a seeded shuffle of the sorted titles) for fine-tuning, the rest for evaluation, in a seeded random
    order so that the first N of the evaluation file are a random sample."""
    titles = sorted({article_of(p["id"]) for p in squad.paragraphs})
    random.Random(seed).shuffle(titles)
    train_titles = set(titles[: round(len(titles) * train_fraction)])
    split = {"train": [], "test": []}
    for q in squad.questions:
        split["train" if article_of(q.paragraph_id) in train_titles else "test"].append(q)
    random.Random(seed).shuffle(split["test"])
    files = {}
    for name, questions in split.items():
        files[name] = out / f"qa_{name}.jsonl"
        with files[name].open("w", encoding="utf-8") as handle:
            for q in questions:
                record = {"question": q.question, "answers": q.answers, "id": q.id}
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    return {
        "files": files,
        "num_train_articles": len(train_titles),
        "num_test_articles": len(titles) - len(train_titles),
        "num_train": len(split["train"]),
        "num_test": len(split["test"]),
    }


@dataclass(frozen=True)
class Encoded:
    """One encoder's view of the paragraphs: its tokenizer (and the folder it is read from), blocks and X."""

    tokenizer: PreTrainedTokenizerBase
    tokenizer_path: Path
    blocks: Path
    sentences: Path
    """X: every block's sentences as ``{"text", "source_uid"}`` (jsonl), so a sentence never retrieves its block."""


def make_blocks(squad: Squad, tokenizer: PreTrainedTokenizerBase, tokenizer_path: Path, max_block_length: int,
                out: Path) -> Encoded:  # fmt: skip
    """Blocks of the paragraphs in ``out/blocks`` cut by ``tokenizer`` (saved at ``tokenizer_path``), and X."""
    blocks_dir = build_blocks_from_config(
        CorpusConfig(path=str(squad.corpus), max_block_length=max_block_length), tokenizer, out / "blocks"
    )
    blocks = load_blocks(blocks_dir)
    sentences = out / "sentences.jsonl"
    with sentences.open("w", encoding="utf-8") as handle:
        for text, uid in zip(blocks["text"], blocks["uid"]):
            for start, end in split_sentences(text):
                handle.write(json.dumps({"text": text[start:end], "source_uid": uid}, ensure_ascii=False) + "\n")
    return Encoded(tokenizer, tokenizer_path, blocks_dir, sentences)
