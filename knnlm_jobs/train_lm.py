"""``realm knnlm train-lm``: train the tiny GPT-2 of the demo, tests and benchmark on a corpus (no hub needed).

    realm knnlm train-lm --corpus.path=train.jsonl --out=LM_DIR [--lm.steps=2000 --lm.hidden_size=256]

Output: ``LM_DIR`` with ``model.safetensors``, ``config.json``, the tokenizer and a manifest (published by rename);
``--lm.model=LM_DIR`` of ``realm knnlm build / evaluate`` loads it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from realm.core.config import config_from_command_line
from realm.core.errors import run_command
from realm.core.logging import init_logging, set_num_threads
from realm.data.corpus import CorpusConfig
from realm.knnlm.datastore_build import read_texts
from realm.knnlm.tiny_lm import TinyLMConfig, train_tiny_lm
from realm.knnlm_jobs.evaluate_lm import require


@dataclass(kw_only=True, slots=True)
class TrainLMConfig:
    out: str = ""
    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    lm: TinyLMConfig = field(default_factory=TinyLMConfig)
    num_threads: int = 0


def main(argv: list[str] | None = None) -> int:
    cfg = config_from_command_line(TrainLMConfig, argv, "realm knnlm train-lm", __doc__.splitlines()[0])
    require(cfg, "out", "corpus.path")
    init_logging()
    set_num_threads(cfg.num_threads)
    print(f"published {train_tiny_lm(read_texts(cfg.corpus), cfg.lm, cfg.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(run_command("realm knnlm train-lm", main, sys.argv[1:]))
