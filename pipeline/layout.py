"""The layout of a pipeline's output folder ``OUT`` (``realm demo``, ``realm real-text``), as ``realm.run.layout`` is a
run directory's: the one place that names each stage's folder, for the pipelines, the benchmarks, the experiments and
the tests.

```
OUT/                            the REALM pre-training run (realm.run.layout) and the pipeline's summary.json
  world/                        the demo's generated world (realm.data.world.write_world): corpus, X, held-out
                                sentences, questions
  tokenizer/                    the WordPiece vocabulary trained on the corpus (none with real text's init_from)
  blocks/                       the knowledge corpus cut into blocks for the pre-training retriever
  cloze/                        real text: X, the held-out cloze set, the held-out articles (realm.data.cloze_sets)
  copy/I_words_N/               real text: copy-curriculum stage I on N words (its corpus, blocks and warm-up run)
  warmup/                       the reader warm-up run; warmup/encoder/ the encoder it publishes
  ict/                          the ICT run; ict/retriever/ the retriever it publishes
  qa/                           the QA fine-tuning run (realm finetune)
```
"""

from __future__ import annotations

from pathlib import Path

from realm.data.articles import HELDOUT_ARTICLES_FILE
from realm.warmstart.ict_train import RETRIEVER_DIR as ICT_EXPORT
from realm.warmstart.warmup import ENCODER_DIR as WARMUP_EXPORT

WORLD_DIR, TOKENIZER_DIR, BLOCKS_DIR, CLOZE_DIR = "world", "tokenizer", "blocks", "cloze"
COPY_DIR, WARMUP_DIR, ICT_DIR, QA_DIR = "copy", "warmup", "ict", "qa"


def world_dir(out: str | Path) -> Path:
    return Path(out) / WORLD_DIR


def world_file(out: str | Path, name: str) -> Path:
    """One of the world's files by its key in ``write_world``'s paths (``pretrain``, ``heldout``, ``entities``,
    ``questions_heldout``, ...): ``OUT/world/NAME.jsonl``."""
    return world_dir(out) / f"{name}.jsonl"


def tokenizer_dir(out: str | Path) -> Path:
    return Path(out) / TOKENIZER_DIR


def blocks_dir(out: str | Path) -> Path:
    return Path(out) / BLOCKS_DIR


def cloze_dir(out: str | Path) -> Path:
    return Path(out) / CLOZE_DIR


def cloze_file(out: str | Path, name: str) -> Path:
    """``pretrain`` (X) or ``heldout`` (the held-out cloze set): ``OUT/cloze/NAME.jsonl``."""
    return cloze_dir(out) / f"{name}.jsonl"


def heldout_articles(out: str | Path) -> Path:
    """The real-text pipeline's held-out article list, ``OUT/cloze/heldout_articles.txt``."""
    return cloze_dir(out) / HELDOUT_ARTICLES_FILE


def copy_dir(out: str | Path) -> Path:
    return Path(out) / COPY_DIR


def copy_stage_dir(out: str | Path, index: int, words: int) -> Path:
    """Copy-curriculum stage ``index`` on the ``words`` most frequent words (0: all), ``OUT/copy/I_words_N``."""
    return copy_dir(out) / f"{index}_words_{words or 'all'}"


def warmup_dir(out: str | Path) -> Path:
    return Path(out) / WARMUP_DIR


def warmup_encoder(out: str | Path) -> Path:
    """The reader warm-up's encoder, what pre-training's ``train.init_encoder`` names."""
    return warmup_dir(out) / WARMUP_EXPORT


def ict_dir(out: str | Path) -> Path:
    return Path(out) / ICT_DIR


def ict_retriever(out: str | Path) -> Path:
    """ICT's retriever, what pre-training's ``train.init_retriever`` names."""
    return ict_dir(out) / ICT_EXPORT


def pretrain_run(out: str | Path) -> Path:
    """The pre-training run directory: the pipeline's folder itself (its summary, ``config.yaml``, index, model)."""
    return Path(out)


def qa_run(out: str | Path) -> Path:
    return Path(out) / QA_DIR
