"""``realm knnlm tune``: k, tau and lambda chosen on a validation split, then one report on a test split.

    realm knnlm tune --lm.model=LM_DIR --datastore=DATASTORE --valid.path=valid.jsonl --test.path=test.jsonl \
        --out=RESULTS [--datastore_corpus.path=train.jsonl --sweep.ks=[16,64,256,1024] --sweep.taus=[1,3,10]
        --sweep.lambdas=[0.1,0.25,0.5,0.65] --overlap.ngram=32 --overlap.action=refuse
        --bootstrap.num_resamples=1000 --bootstrap.unit=token]

The protocol, in order (nothing is scored before the checks pass):

1. Validation and test must not share an article (a document's title; ``--valid.title_field`` / ``--test.title_field``
   name another field holding an article id): refused, naming how many and one.
2. Leak checks (``realm.knnlm.overlap``): exact ``overlap.ngram``-token overlap of validation and of test with the
   datastore's own tokens, and of test with validation. With ``--datastore_corpus.path`` (the text the datastore was
   built from, checked against its manifest's fingerprint) its articles must also differ from validation's and
   test's. Refused by default; ``--overlap.action=report`` measures anyway and records the overlap.
3. Selection on validation only: one LM pass and one search of the grid's largest k, every (k, tau, lambda) of the
   grid scored, the lowest kNN-LM perplexity chosen (``realm.knnlm.perplexity``).
4. One report on test, with the chosen setting: the LM alone vs the kNN-LM over the same tokens and the
   paired-bootstrap interval of the relative perplexity change (``realm.knnlm.bootstrap``).

Writes ``RESULTS/tune.json`` (every figure, check, the chosen setting and the interval), ``RESULTS/tune.md`` (the
table it prints), ``RESULTS/valid_sweep.jsonl`` (the validation grid) and ``RESULTS/metrics.jsonl``, each atomically.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from realm.core.atomic import write_text_atomic
from realm.core.checks import Problems
from realm.core.config import config_from_command_line
from realm.core.errors import ConfigError, run_command
from realm.core.logging import init_logging
from realm.core.tracking import TrackingConfig
from realm.data.corpus import CorpusConfig
from realm.knnlm import perplexity as ev
from realm.knnlm.bootstrap import BootstrapConfig
from realm.knnlm.datastore import tokens_fingerprint, values_of
from realm.knnlm.lm import LMConfig, num_targets, tokenize_documents
from realm.knnlm.overlap import NgramIndex, OverlapConfig, enforce, measure_overlap
from realm.knnlm.splits import check_disjoint, read_articles, shared_articles
from realm.knnlm_jobs.evaluate_lm import Loaded, Prepared, finish, load, require, start_tracking
from realm.knnlm_jobs.sweep import SweepGrid

RESULTS_FILE = "tune.json"
TABLE_FILE = "tune.md"
VALID_SWEEP_FILE = "valid_sweep.jsonl"
SPLITS = (("validation", "valid"), ("test", "test"))
"""(split name, its option) of the two evaluation splits."""


@dataclass(kw_only=True, slots=True)
class KNNLMTuneConfig:
    out: str = ""
    """Results folder (created if needed)."""
    lm: LMConfig = field(default_factory=LMConfig)
    datastore: str = ""
    """A datastore folder (its CURRENT version) or one version."""
    valid: CorpusConfig = field(default_factory=CorpusConfig)
    """Validation texts: where k, tau and lambda are chosen (articles disjoint from test's)."""
    test: CorpusConfig = field(default_factory=CorpusConfig)
    """Test texts: scored once, with the chosen setting."""
    datastore_corpus: CorpusConfig = field(default_factory=CorpusConfig)
    """Optional: the text the datastore was built from, whose articles are then checked too; empty: the token
    n-gram check only (it reads the datastore's own tokens)."""
    knn: ev.KNNConfig = field(default_factory=ev.KNNConfig)
    """Search settings (``knn.k`` is set to the grid's largest k)."""
    sweep: SweepGrid = field(default_factory=SweepGrid)
    overlap: OverlapConfig = field(default_factory=OverlapConfig)
    bootstrap: BootstrapConfig = field(default_factory=BootstrapConfig)
    nprobe: int = 32
    """IVF lists visited per query (approximate datastores)."""
    verify: bool = True
    """Check the datastore's files against their manifest checksums before use."""
    num_threads: int = 0
    tracking: TrackingConfig = field(default_factory=TrackingConfig)

    def __post_init__(self) -> None:
        problems = Problems()
        if self.nprobe <= 0:
            problems.add(f"nprobe must be positive, got {self.nprobe}")
        self.knn.k = max(self.sweep.ks)  # note: one search of the largest k serves every k of the grid
        problems.raise_if_any()


def check_datastore_articles(cfg: KNNLMTuneConfig, loaded: Loaded, articles: dict[str, list[str]]) -> dict[str, Any]:
    """Articles of ``--datastore_corpus`` shared with validation or test (refused unless overlap.action=report)."""
    texts, ids = read_articles(cfg.datastore_corpus, "datastore_corpus")
    if tokens_fingerprint(tokenize_documents(loaded.tokenizer, texts)) != loaded.store.manifest.get("corpus_sha256"):
        raise ConfigError(f"--datastore_corpus.path={cfg.datastore_corpus.path} is not the text {loaded.store.path} "
                          "was built from (its tokens' sha256 differs from the manifest's corpus_sha256)")  # fmt: skip
    out = {"path": cfg.datastore_corpus.path, "articles": len(set(ids))}
    for name, split in articles.items():
        both = shared_articles(ids, split)
        out[f"shared_with_{name}"] = len(both)
        if both and cfg.overlap.action == "refuse":
            check_disjoint({"the datastore's text": ids, name: split})
    return out


def check_splits(cfg: KNNLMTuneConfig, loaded: Loaded, docs: dict[str, list[np.ndarray]],
                 articles: dict[str, list[str]]) -> dict[str, Any]:  # fmt: skip
    """Steps 1 and 2 of the protocol; what they found (refusing what ``cfg.overlap`` refuses)."""
    check_disjoint({name: articles[name] for name, _ in SPLITS})
    n = cfg.overlap.ngram
    store = NgramIndex(loaded.store.values, n, "datastore")
    validation = NgramIndex(values_of(docs["validation"]), n, "validation")
    found = [
        measure_overlap(docs["validation"], store, "validation"),
        measure_overlap(docs["test"], store, "test"),
        measure_overlap(docs["test"], validation, "test"),
    ]
    overlap = {"ngram": n, "max_fraction": cfg.overlap.max_fraction, "action": cfg.overlap.action}
    record: dict[str, Any] = {"validation_test_shared_articles": 0, "overlap_config": overlap}
    record["datastore_articles"] = "not checked (no --datastore_corpus.path)"
    leaks = []
    if cfg.datastore_corpus.path:
        record["datastore_articles"] = check_datastore_articles(cfg, loaded, articles)
        leaks += [f"datastore articles {key}" for key, v in record["datastore_articles"].items()
                  if key.startswith("shared_with_") and v]  # fmt: skip
    record["ngram_overlap"] = [o.to_dict() for o in found]
    leaks += [o.what for o in found if enforce(o, cfg.overlap, loaded.tokenizer.decode)]
    record["reported_leaks"] = leaks  # note: what overlap.action=report let through (refuse raised above)
    return record


def split_info(corpus: CorpusConfig, docs: list[np.ndarray], articles: list[str]) -> dict[str, Any]:
    return {"path": corpus.path, "documents": len(docs), "articles": len(set(articles)),
            "tokens": int(num_targets(docs).sum())}  # fmt: skip


def run(cfg: KNNLMTuneConfig) -> dict[str, Any]:
    loaded = load(cfg)
    texts, articles = {}, {}
    for name, option in SPLITS:
        texts[name], articles[name] = read_articles(getattr(cfg, option), option)
    docs = {name: tokenize_documents(loaded.tokenizer, split) for name, split in texts.items()}
    checks = check_splits(cfg, loaded, docs, articles)
    accelerator, metrics = start_tracking(cfg, "knnlm_tune")
    valid = ev.collect(loaded.model, docs["validation"], cfg.lm, loaded.store, cfg.knn)
    chosen, grid = ev.choose(valid, cfg.sweep.ks, cfg.sweep.taus, cfg.sweep.lambdas)
    k, tau, lam = chosen["k"], chosen["tau"], chosen["lambda"]
    del valid  # note: the choice is made; test is scored only now, once, with it
    test = ev.collect(loaded.model, docs["test"], cfg.lm, loaded.store, cfg.knn)
    reported, difference = ev.report(test, chosen, cfg.bootstrap)
    result = {
        "protocol": "k, tau and lambda chosen on validation (articles disjoint from test's, leak-checked against the "
                    "datastore); test scored once with them",
        "chosen": {"k": k, "tau": tau, "lambda": lam, "chosen_on": "validation", "grid_size": len(grid)},
        "grid": {"ks": cfg.sweep.ks, "taus": cfg.sweep.taus, "lambdas": cfg.sweep.lambdas},
        "validation": {**split_info(cfg.valid, docs["validation"], articles["validation"]),
                       "ppl_lm": chosen["ppl_lm"], "ppl_knnlm": chosen["ppl_knnlm"]},
        "test": {**split_info(cfg.test, docs["test"], articles["test"]),
                 **{key: reported[key] for key in ("ppl_lm", "ppl_knnlm", "lm_tokens_per_s", "knnlm_tokens_per_s")}},
        "difference": {"what": "test perplexity of the kNN-LM relative to the LM alone (ppl_knnlm / ppl_lm - 1)",
                       **difference.to_dict()},
        "checks": checks,
        "datastore": loaded.datastore,
    }  # fmt: skip
    table = format_table(result)
    out = Path(cfg.out)
    write_text_atomic(out / VALID_SWEEP_FILE, "".join(json.dumps(r) + "\n" for r in grid))
    write_text_atomic(out / TABLE_FILE, table + "\n")
    write_text_atomic(out / RESULTS_FILE, json.dumps(result, indent=2) + "\n")
    metrics.log({f"tune/test_{key}": v for key, v in difference.to_dict().items() if isinstance(v, (int, float))}, 0)
    finish(Prepared(test, loaded.datastore, accelerator, metrics))
    return result


def _percent(x: float) -> str:
    return f"{x:+.2%}"


def format_table(result: dict[str, Any]) -> str:
    """The results as a markdown table with the checks below it (what ``tune.md`` holds)."""
    c, v, t, d = result["chosen"], result["validation"], result["test"], result["difference"]
    lines = ["| split | articles | documents | tokens | LM ppl | kNN-LM ppl | change [CI] |", "|---" * 7 + "|"]
    settings = f"k {c['k']}, tau {c['tau']}, lambda {c['lambda']}"
    lines.append(f"| validation: chose {settings} of {c['grid_size']} settings | {v['articles']} | {v['documents']} | "
                 f"{v['tokens']:,} | {v['ppl_lm']:.3f} | {v['ppl_knnlm']:.3f} | "
                 f"{_percent(v['ppl_knnlm'] / v['ppl_lm'] - 1)} (chosen on it) |")
    lines.append(f"| test: scored once with it | {t['articles']} | {t['documents']} | {t['tokens']:,} | "
                 f"{t['ppl_lm']:.3f} | {t['ppl_knnlm']:.3f} | {_percent(d['relative_change'])} "
                 f"[{_percent(d['ci_low'])}, {_percent(d['ci_high'])}] |")  # fmt: skip
    checks = result["checks"]
    overlaps = ", ".join(f"{o['what']} {o['fraction']:.2%}" for o in checks["ngram_overlap"])
    lines.append(f"change: ppl_knnlm / ppl_lm - 1; {d['confidence']:.0%} paired-bootstrap interval over "
                 f"{d['num_units']:,} {d['unit']}s ({d['num_resamples']} resamples, seed {d['seed']})")
    lines.append(f"checks: validation and test share no article; {checks['overlap_config']['ngram']}-token overlap: "
                 f"{overlaps}; datastore articles: {json.dumps(checks['datastore_articles'])}")  # fmt: skip
    if checks["reported_leaks"]:
        lines.append(f"WARNING: leaks reported, not refused (overlap.action=report): {checks['reported_leaks']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    cfg = config_from_command_line(KNNLMTuneConfig, argv, "realm knnlm tune", __doc__.splitlines()[0])
    require(cfg, "out", "valid.path", "test.path", "lm.model", "datastore")
    init_logging()
    result = run(cfg)
    print(format_table(result))
    print(f"{cfg.out}/{RESULTS_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(run_command("realm knnlm tune", main, sys.argv[1:]))
