"""``realm knnlm inspect``: the nearest datastore entries of a token's key, their weights, tokens and contexts.

    realm knnlm inspect --lm.model=LM_DIR --datastore=DATASTORE --text="The capital of France is Paris." \
        [--positions=[6] --knn.k=1024 --knn.tau=1.0 --knn.lambda_=0.25 --show=10 --inspect.context_tokens=16
         --json=inspect.json]
    realm knnlm inspect --lm.model=LM_DIR --datastore=DATASTORE --data.path=test.jsonl --doc=3 --positions=[17]

A position counts the text's tokens from 1, as ``realm knnlm evaluate``'s tokens.jsonl does (``doc`` is its document
index too, ``--doc_id`` a record's ``id`` instead); no position: every token. For each position it prints p_LM, p_kNN
and their mixture, the tokens of highest p_kNN, and the ``--show`` nearest neighbours: rank, weight (share of
p_kNN), distance, token, where it is in the datastore's corpus and the text before it with the token marked
``[[so]]``. ``--json`` writes every neighbour of every position (atomically).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field

from realm.core.atomic import write_text_atomic
from realm.core.checks import Problems
from realm.core.config import config_from_command_line
from realm.core.errors import ArgumentError, ConfigError, run_command
from realm.core.logging import init_logging
from realm.data.corpus import CorpusConfig
from realm.knnlm.datastore_build import read_corpus
from realm.knnlm.lm import LMConfig, tokenize_documents
from realm.knnlm.neighbours import Context, InspectConfig, Inspection, inspect_positions
from realm.knnlm.perplexity import KNNConfig
from realm.knnlm_jobs.evaluate_lm import load, require


@dataclass(kw_only=True, slots=True)
class KNNLMInspectConfig:
    lm: LMConfig = field(default_factory=LMConfig)
    datastore: str = ""
    """A datastore folder (its CURRENT version) or one version, built from ``lm``."""
    text: str = ""
    """The text to inspect; or use ``data.path`` with ``doc`` / ``doc_id``."""
    data: CorpusConfig = field(default_factory=CorpusConfig)
    """An evaluation file (any realm.data.corpus format) holding the document to inspect."""
    doc: int = -1
    """The document's index in ``data.path`` (0 = first; tokens.jsonl's ``doc``)."""
    doc_id: str = ""
    """The document's ``id`` field, instead of ``doc``."""
    positions: list[int] | int = field(default_factory=list)
    """Positions to inspect (1 = the first token, as tokens.jsonl counts); one number or a list; empty: every token."""
    knn: KNNConfig = field(default_factory=KNNConfig)
    """k, tau, lambda_ and recompute, as ``realm knnlm evaluate`` takes them."""
    inspect: InspectConfig = field(default_factory=InspectConfig)
    show: int = 10
    """Neighbours printed per position (``--json`` holds all k)."""
    json: str = ""
    """Write the inspections here as JSON (written atomically); empty: print only."""
    nprobe: int = 32
    """IVF lists visited per query (approximate datastores)."""
    verify: bool = True
    """Check the datastore's files against their manifest checksums before use."""
    num_threads: int = 0

    def __post_init__(self) -> None:
        problems = Problems()
        if isinstance(self.positions, int):
            self.positions = [self.positions]
        if self.show < 0 or self.nprobe <= 0:
            problems.add(f"show must be >= 0 and nprobe positive, got {self.show}, {self.nprobe}")
        problems.raise_if_any()


def select_text(cfg: KNNLMInspectConfig) -> tuple[str, str]:
    """(the text to inspect, how errors name it): ``--text``, or one document of ``--data.path``."""
    document = cfg.doc >= 0 or bool(cfg.doc_id)
    if bool(cfg.text) == bool(cfg.data.path):
        raise ConfigError("give exactly one of --text and --data.path (with --doc or --doc_id)")
    if cfg.text:
        if document:
            raise ConfigError("--doc and --doc_id select a document of --data.path; they do not apply to --text")
        return cfg.text, "the text"
    if (cfg.doc >= 0) == bool(cfg.doc_id):
        raise ConfigError(f"with --data.path={cfg.data.path}, give exactly one of --doc (an index) and --doc_id")
    docs = read_corpus(cfg.data)
    if cfg.doc_id:
        found = [i for i, d in enumerate(docs) if d.id == cfg.doc_id]
        if not found:
            examples = ", ".join(repr(d.id) for d in docs[:3])
            raise ArgumentError(f"--doc_id={cfg.doc_id!r}: no document has that id in {cfg.data.path} ({len(docs)} "
                                f"documents; ids such as {examples})")  # fmt: skip
        index = found[0]
    elif cfg.doc >= len(docs):
        raise ArgumentError(f"--doc={cfg.doc}: {cfg.data.path} has {len(docs)} documents, so --doc is "
                            f"0..{len(docs) - 1}")  # fmt: skip
    else:
        index = cfg.doc
    doc = docs[index]
    return doc.text, f"document {index} of {cfg.data.path} (id {doc.id!r}, {doc.where or 'no line'})"


def run(cfg: KNNLMInspectConfig) -> tuple[str, list[Inspection]]:
    """(how the text is named, its inspections); the JSON is written when ``cfg.json`` names a file."""
    text, where = select_text(cfg)
    loaded = load(cfg)
    tokens = tokenize_documents(loaded.tokenizer, [text])[0]
    found = inspect_positions(loaded.model, loaded.tokenizer, loaded.store, tokens, cfg.positions, cfg.lm, cfg.knn,
                              cfg.inspect, where)  # fmt: skip
    if cfg.json:
        record = {"text": where, "datastore": loaded.datastore, "recompute": cfg.knn.recompute,
                  "inspections": [i.to_dict() for i in found]}  # fmt: skip
        write_text_atomic(cfg.json, json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    return where, found


def _with_context(context: Context | None, token: str) -> str:
    if context is None:
        return f"(context unavailable) [[{token}]]"
    start = "<doc> " if context.starts_document else "... "
    return f"{start}{context.text} [[{token}]]".replace("\n", " ")


def format_inspection(found: Inspection, show: int) -> str:
    """One position as text: its probabilities, its top p_kNN tokens and its ``show`` nearest neighbours."""
    lines = [
        f"position {found.position}: {_with_context(found.context, found.token)}",
        f"  p_LM {found.p_lm:.4f}   p_kNN {found.p_knn:.4f} (k {found.k}, tau {found.tau})   "
        f"p = {found.lambda_} p_kNN + {1 - found.lambda_:g} p_LM = {found.p:.4f}",
        "  p_kNN by token: " + ", ".join(f"{t['token']!r} {t['p_knn']:.3f}" for t in found.top_tokens),
    ]
    if found.contexts != "available":
        lines.append(f"  neighbours' contexts {found.contexts}")
    distance = "dist" if found.metric == "l2" else "score"
    lines.append(f"  {'rank':>4}  {'weight':>7}  {distance:>9}  {'token':<12} {'doc:pos':<11} context")
    for n in found.neighbours[:show]:
        where = f"{n.doc}:{n.position}" if n.doc is not None else "-"
        mark = "*" if n.is_target else " "
        shown = n.distance if n.distance is not None else n.score
        lines.append(f"  {n.rank:>4}{mark} {n.weight:>7.4f}  {shown:>9.3f}  {n.token!r:<12} {where:<11} "
                     f"{_with_context(n.context, n.token)}")  # fmt: skip
    if len(found.neighbours) > show:
        rest = sum(n.weight for n in found.neighbours[show:])
        lines.append(f"  ... {len(found.neighbours) - show} more neighbours hold weight {rest:.4f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    cfg = config_from_command_line(KNNLMInspectConfig, argv, "realm knnlm inspect", __doc__.splitlines()[0])
    require(cfg, "lm.model", "datastore")
    init_logging()
    where, found = run(cfg)
    print(f"{where}; datastore {cfg.datastore}; * = the neighbour's token is the target (their weights sum to p_kNN)")
    for inspection in found:
        print(format_inspection(inspection, cfg.show))
    if cfg.json:
        print(cfg.json)
    return 0


if __name__ == "__main__":
    sys.exit(run_command("realm knnlm inspect", main, sys.argv[1:]))
