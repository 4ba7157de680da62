"""``realm knnlm evaluate``: perplexity of a causal LM with and without a kNN-LM datastore, over a whole text set.

    realm knnlm evaluate --lm.model=LM_DIR --datastore=DATASTORE --data.path=heldout.jsonl --out=RESULTS
        [--knn.k=1024 --knn.lambda_=0.25 --knn.tau=1.0 --knn.recompute=true --tracking.report_to=wandb]

On a GPU: ``--lm.device=cuda --knn.gpu_search=true`` runs the LM there and searches the datastore there too
(faiss-gpu, or exact torch search of a Flat datastore where FAISS is CPU-only; ``realm.index.torch_search``).

Writes ``RESULTS/summary.json`` (perplexities, tokens/s with and without the datastore, the datastore's manifest
fields), ``RESULTS/tokens.jsonl`` (one line per token: p_lm, p_knn, lambda, p) and ``RESULTS/metrics.jsonl``, and
reports to W&B / TensorBoard through the run's trackers; ``realm report RESULTS`` plots them. Without
``--datastore`` only the LM is scored.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelerate import Accelerator
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from realm.core.atomic import write_text_atomic
from realm.core.checks import Problems
from realm.core.config import config_from_command_line, to_dict
from realm.core.errors import ConfigError, run_command
from realm.core.logging import MetricsLogger, init_logging, set_num_threads
from realm.core.tracking import (
    TrackingConfig,
    accelerator_kwargs,
    init_trackers,
    log_wandb_table,
)
from realm.data.corpus import CorpusConfig
from realm.index.mips import IndexConfig
from realm.knnlm import perplexity as ev
from realm.knnlm.datastore import Datastore, load_datastore
from realm.knnlm.datastore_build import read_texts
from realm.knnlm.lm import LMConfig, load_causal_lm, tokenize_documents
from realm.run.layout import METRICS_FILE, SUMMARY_FILE

logger = logging.getLogger(__name__)

TOKENS_FILE = "tokens.jsonl"
SWEEP_FILE = "sweep.jsonl"
# note: manifest fields copied into the summary, so a result says what it was measured against
_DATASTORE_FIELDS = ("num_entries", "key_type", "metric", "factory", "corpus", "lm")


@dataclass(kw_only=True, slots=True)
class KNNLMEvalConfig:
    out: str = ""
    """Results folder (created if needed)."""
    lm: LMConfig = field(default_factory=LMConfig)
    datastore: str = ""
    """A datastore folder (its CURRENT version) or one version; empty: the LM alone."""
    data: CorpusConfig = field(default_factory=CorpusConfig)
    """The evaluation texts (jsonl with a ``text`` field, or any realm.data.corpus format)."""
    knn: ev.KNNConfig = field(default_factory=ev.KNNConfig)
    nprobe: int = 32
    """IVF lists visited per query (approximate datastores)."""
    verify: bool = True
    """Check the datastore's files against their manifest checksums before use."""
    records: bool = True
    """Write ``tokens.jsonl``."""
    num_threads: int = 0
    tracking: TrackingConfig = field(default_factory=TrackingConfig)

    def __post_init__(self) -> None:
        problems = Problems()
        if self.nprobe <= 0:
            problems.add(f"nprobe must be positive, got {self.nprobe}")
        problems.raise_if_any()


@dataclass(slots=True)
class Loaded:
    """The LM, its tokenizer, and the datastore checked against it (None: the LM alone) with its manifest fields."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    store: Datastore | None
    datastore: dict[str, Any]


@dataclass(slots=True)
class Prepared:
    neighbours: ev.Neighbours
    datastore: dict[str, Any]
    accelerator: Accelerator
    metrics: MetricsLogger


def load(cfg: Any) -> Loaded:
    """Sets the thread count, loads ``cfg.lm`` and ``cfg.datastore`` (if any) and refuses a datastore of other LM
    weights."""
    set_num_threads(cfg.num_threads)
    model, tokenizer = load_causal_lm(cfg.lm)
    store = None
    if cfg.datastore:
        index_cfg = IndexConfig(nprobe=cfg.nprobe, enable_gpu_search=cfg.knn.gpu_search)
        store = load_datastore(cfg.datastore, index_cfg, verify=cfg.verify)
        ev.check_compatible(model, store)
    info = {name: store.manifest.get(name) for name in _DATASTORE_FIELDS} if store is not None else {}
    if store is not None:
        info["version"] = str(store.path)
    return Loaded(model, tokenizer, store, info)


def start_tracking(cfg: Any, job_type: str) -> tuple[Accelerator, MetricsLogger]:
    """Creates ``cfg.out``, the run's trackers (W&B / TensorBoard per ``cfg.tracking``) and its metrics log."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    accelerator = Accelerator(cpu=cfg.lm.device == "cpu", **accelerator_kwargs(cfg.tracking, out))
    init_trackers(accelerator, cfg.tracking, out, to_dict(cfg), job_type=job_type)
    return accelerator, MetricsLogger(out / METRICS_FILE, accelerator)


def prepare(cfg: Any, job_type: str) -> Prepared:
    """Loads the LM and datastore, scores the data once (``realm.knnlm.perplexity.collect``), starts the trackers."""
    loaded = load(cfg)
    docs = tokenize_documents(loaded.tokenizer, read_texts(cfg.data))
    accelerator, metrics = start_tracking(cfg, job_type)
    neighbours = ev.collect(loaded.model, docs, cfg.lm, loaded.store, cfg.knn)
    return Prepared(neighbours, loaded.datastore, accelerator, metrics)


def finish(prepared: Prepared) -> None:
    prepared.metrics.close()
    prepared.accelerator.end_training()


def run(cfg: KNNLMEvalConfig) -> dict[str, Any]:
    prepared = prepare(cfg, "knnlm_evaluate")
    nb = prepared.neighbours
    summary = {**ev.score(nb, cfg.knn.k, cfg.knn.tau, cfg.knn.lambda_ if cfg.datastore else 0.0)}
    summary["datastore"] = prepared.datastore
    summary["recompute"] = cfg.knn.recompute
    prepared.metrics.log({f"knnlm/{k}": v for k, v in summary.items() if isinstance(v, (int, float))}, step=0)
    out = Path(cfg.out)
    if cfg.records:
        ev.write_token_records(out / TOKENS_FILE, nb, cfg.knn.k, cfg.knn.tau, summary["lambda"])
    write_text_atomic(out / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
    log_wandb_table(prepared.accelerator, "knnlm/summary", (list(summary), [[str(v) for v in summary.values()]]), 0)
    finish(prepared)
    return summary


def require(cfg: Any, *names: str) -> None:
    """A clear error naming every required option left empty (dotted names, e.g. ``data.path``)."""
    missing = []
    for name in names:
        value = cfg
        for part in name.split("."):
            value = getattr(value, part)
        if not value:
            missing.append(f"--{name}")
    if missing:
        raise ConfigError(f"required option(s) missing: {', '.join(missing)}")


def main(argv: list[str] | None = None) -> int:
    cfg = config_from_command_line(KNNLMEvalConfig, argv, "realm knnlm evaluate", __doc__.splitlines()[0])
    require(cfg, "out", "data.path", "lm.model")
    init_logging()
    summary = run(cfg)
    print(
        f"{summary['tokens']} tokens: perplexity {summary['ppl_lm']:.3f} (LM) -> {summary['ppl_knnlm']:.3f} (kNN-LM, "
        f"k={summary['k']}, lambda={summary['lambda']}, tau={summary['tau']}); {cfg.out}/{SUMMARY_FILE}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(run_command("realm knnlm evaluate", main, sys.argv[1:]))
