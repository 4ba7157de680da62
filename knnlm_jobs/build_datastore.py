"""``realm knnlm build``: the datastore builder process (one, or N joined by a launcher).

    realm knnlm build --lm.model=LM_DIR --corpus.path=train.jsonl --out=DATASTORE [--datastore.key_type=attn_output
        --datastore.index.factory=IVF1024,PQ32 --datastore.index.metric=ip --datastore.index.memory_budget_gb=2]
    torchrun --standalone --nproc_per_node 2 -m realm.knnlm_jobs.build_datastore --lm.model=... --out=... \
        --enable_distributed=true

Output: ``DATASTORE/ds-NNNNNNNN/`` (keys, values, FAISS index, manifest) and ``DATASTORE/CURRENT``; see
``realm.knnlm.datastore``. SIGTERM stops it between batches: nothing is published, finished shards are kept and a
rerun reuses them.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import torch

from realm.core.checks import Problems
from realm.core.config import config_from_command_line
from realm.core.errors import ConfigError, run_command
from realm.core.logging import init_logging, set_num_threads
from realm.core.process_exit import exit_code_after_run
from realm.data.corpus import CorpusConfig
from realm.index.builder_group import BuilderGroup
from realm.knnlm.datastore import LOCK_FILE, DatastoreConfig
from realm.knnlm.datastore_build import build_datastore, clean_start
from realm.knnlm.lm import LMConfig
from realm.knnlm_jobs.evaluate_lm import require
from realm.run import publication

logger = logging.getLogger(__name__)


@dataclass(kw_only=True, slots=True)
class KNNLMBuildConfig:
    out: str = ""
    """The datastore folder (created if needed)."""
    lm: LMConfig = field(default_factory=LMConfig)
    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    """The datastore's text: a jsonl file with a ``text`` field (or DPR tsv, HF dataset: realm.data.corpus)."""
    datastore: DatastoreConfig = field(default_factory=DatastoreConfig)
    enable_distributed: bool = False
    """Join the process group of a launcher (torchrun / accelerate launch): each rank computes one shard of keys."""
    collective_timeout_s: float = 1800.0
    """How long a rank waits for its peers at a collective step before failing."""
    lock_timeout_s: float = 0.0
    """Seconds to wait for another builder of the same datastore to finish (0: fail at once)."""
    num_threads: int = 0

    def __post_init__(self) -> None:
        problems = Problems()
        if self.collective_timeout_s <= 0 or self.lock_timeout_s < 0:
            problems.add("collective_timeout_s must be positive and lock_timeout_s >= 0")
        problems.raise_if_any()


def run(cfg: KNNLMBuildConfig) -> Path:
    set_num_threads(cfg.num_threads)
    device = "cuda" if cfg.lm.device.startswith("cuda") else "cpu"
    group = BuilderGroup.join(device, cfg.collective_timeout_s) if cfg.enable_distributed else BuilderGroup()
    if group.world_size > 1 and device == "cuda":
        cfg.lm.device = str(group.device)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    root = Path(cfg.out)
    with contextlib.ExitStack() as stack:

        def take() -> None:
            root.mkdir(parents=True, exist_ok=True)
            stack.enter_context(publication.exclusive_lock(root / LOCK_FILE, timeout_s=cfg.lock_timeout_s))
            clean_start(root)

        group.from_main(take)
        return build_datastore(root, cfg.lm, cfg.corpus, cfg.datastore, group, should_stop=stop.is_set)


def main(argv: list[str] | None = None) -> int:
    cfg = config_from_command_line(KNNLMBuildConfig, argv, "realm knnlm build", __doc__.splitlines()[0])
    require(cfg, "out", "corpus.path", "lm.model")
    init_logging()
    if cfg.enable_distributed and cfg.lm.device not in ("cpu", "cuda"):
        raise ConfigError(f"with enable_distributed, lm.device must be 'cpu' or 'cuda', got {cfg.lm.device!r}")
    version = run(cfg)
    print(f"published {version}")
    distributed = torch.distributed.is_initialized()
    return exit_code_after_run(torch.distributed.get_world_size() if distributed else 1, 0)


if __name__ == "__main__":
    sys.exit(run_command("realm knnlm build", main, sys.argv[1:]))
