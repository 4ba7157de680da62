"""The kNN-LM datastore: one (key, value) pair per token of a corpus, published like a document index.

```
DATASTORE/                        one folder per datastore, written by one builder at a time (.lock)
  ds-00000001/                    a published version: manifest.json written last, then renamed into place
    keys.npy      [N, D] float16  key of every target token (realm.knnlm.lm key types)
    values.npy    [N]    int32    the token itself
    doc_starts.npy [M+1] int64    provenance: entry id where each of the M corpus documents starts (optional:
                                  older datastores lack it; see ``Datastore.locate``)
    index.faiss                   FAISS over the keys (L2 or inner product; exact, IVF-PQ, ... via IndexConfig)
    manifest.json                 LM and corpus fingerprints, key type, metric, factory, sizes, file checksums
  CURRENT                         name of the version readers use (flipped after the publish)
  .shards-<lm_sha256>/            per-rank key shards of an N-process build (realm.index.shards); reused after a
                                  crash, removed once published
  .staging-*                      unpublished work; deleted by the next builder, never read
```

Entries are the corpus's tokens in order (every document's tokens after its BOS, documents in order), so with
``doc_starts`` an entry id names its document and position, and the values before it in that document are the text
its key was computed from: no copy of the text is needed. A datastore without the file reads as before.

Readers only ever open a published version with a manifest whose files match their checksums, so a build killed at
any point leaves nothing that is used.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from realm.core.checks import Problems
from realm.core.errors import RunError
from realm.index import budget, torch_search
from realm.index.mips import FaissIndex, IndexConfig
from realm.run import publication

logger = logging.getLogger(__name__)

PREFIX = "ds-"
KEYS_FILE = "keys.npy"
VALUES_FILE = "values.npy"
FAISS_FILE = "index.faiss"
DOC_STARTS_FILE = "doc_starts.npy"
LOCK_FILE = ".lock"
# queries whose neighbours' keys are gathered at once when re-scoring exactly: bounds that gather's memory
# (256 x 1024 neighbours x 128 dims x 4 bytes = 128 MB) whatever the search batch
_RECOMPUTE_ROWS = 256
FORMAT = "realm-knnlm-datastore/1"


def _default_index() -> IndexConfig:
    return IndexConfig(metric="l2")


@dataclass(kw_only=True, slots=True)
class DatastoreConfig:
    """What the datastore's keys are and how they are indexed."""

    key_type: str = "ffn_input"
    """ffn_input (kNN-LM's default), attn_output, ffn_output or h_sm: see realm.knnlm.lm."""
    layer: int = -1
    """Decoder block the key is read from (0 = the first, -1 = the last, kNN-LM's choice); h_sm takes -1 only."""
    index: IndexConfig = field(default_factory=_default_index)
    """FAISS index over the keys: ``factory`` ("Flat" exact, "IVF4096,PQ64" as in the paper, ...),
    ``memory_budget_gb`` (chooses exact vs IVF-PQ), ``metric`` ("l2", the paper's default, or "ip"), ``nprobe``."""
    keep_versions: int = 2
    """Published versions kept; older ones are removed after a new one is published."""

    def __post_init__(self) -> None:
        problems = Problems()
        from realm.knnlm.lm import KEY_TYPES, LAST_LAYER  # note: lm imports transformers; only constants are needed

        if self.key_type not in KEY_TYPES:
            problems.add(f"key_type must be one of {', '.join(KEY_TYPES)}, got {self.key_type!r}")
        if self.key_type == "h_sm" and self.layer != LAST_LAYER:
            problems.add("key_type h_sm is read at the output layer: layer must stay -1")
        if self.keep_versions < 1:
            problems.add(f"keep_versions must be >= 1, got {self.keep_versions}")
        problems.raise_if_any()


def model_fingerprint(model: nn.Module) -> str:
    """SHA-256 of the model's weights (names, dtypes, shapes, bytes): what the keys depend on."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def tokens_fingerprint(docs: list[np.ndarray]) -> str:
    """SHA-256 of the tokenized corpus (document boundaries included)."""
    digest = hashlib.sha256()
    for doc in docs:
        digest.update(np.int64(len(doc)).tobytes())
        digest.update(np.ascontiguousarray(doc, dtype=np.int32).tobytes())
    return digest.hexdigest()


def values_of(docs: list[np.ndarray]) -> np.ndarray:
    """[N] int32 values in datastore order: every document's tokens after its BOS, documents in order."""
    parts = [d[1:] for d in docs if len(d) > 1]
    return np.concatenate(parts).astype(np.int32) if parts else np.empty(0, dtype=np.int32)


def doc_starts_of(docs: list[np.ndarray]) -> np.ndarray:
    """[num_docs + 1] int64: the entry id of each document's first token (``values_of`` order); the last is N."""
    counts = [max(len(d) - 1, 0) for d in docs]  # note: lm.num_targets; lm is not imported here (DatastoreConfig)
    return np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)


def next_version(root: Path) -> Path:
    latest = publication.latest_published(root, PREFIX)
    return root / publication.folder_name(PREFIX, 1 if latest is None else latest[0] + 1)


def publish_datastore(
    root: Path,
    staging: Path,
    values: np.ndarray,
    cfg: DatastoreConfig,
    manifest: dict[str, Any],
    doc_starts: np.ndarray | None = None,
) -> Path:
    """Indexes ``staging/keys.npy``, writes the values (and ``doc_starts``, the provenance of every entry, when
    given: ``doc_starts_of``), publishes ``staging`` as the next version and points CURRENT at it. Call holding
    ``root/.lock``."""
    keys = np.load(staging / KEYS_FILE, mmap_mode="r")
    if len(keys) != len(values):
        raise RunError(f"{staging}: {len(keys)} keys but {len(values)} values; nothing published")
    if len(keys) == 0:
        raise RunError("the corpus has no token to store (every document is empty); nothing published")
    np.save(staging / VALUES_FILE, values)
    names = [KEYS_FILE, VALUES_FILE, FAISS_FILE]
    if doc_starts is not None:
        _check_doc_starts(doc_starts, len(values), staging)
        np.save(staging / DOC_STARTS_FILE, doc_starts.astype(np.int64))
        names.append(DOC_STARTS_FILE)  # note: listed with its checksum, so it is verified like every other file
    plan = budget.plan_index(len(keys), keys.shape[1], cfg.index)
    index_cfg = dataclasses.replace(cfg.index, factory=plan.factory)
    logger.info("indexing %d keys of dimension %d with %s (%s)", len(keys), keys.shape[1], plan.factory, plan.reason)
    FaissIndex.build(keys, index_cfg).save(staging / FAISS_FILE)
    del keys
    files = publication.file_entries(staging, names)
    full = {
        **manifest,
        "format": FORMAT,
        "factory": plan.factory,
        "metric": cfg.index.metric,
        "key_type": cfg.key_type,
        "num_entries": len(values),
        "files": files,
        "created": publication.now_iso(),
        **plan.manifest_fields(),
    }
    version = publication.publish_folder(staging, next_version(root), full)
    publication.write_pointer(root / publication.CURRENT, version.name)
    for old in publication.prune(root, PREFIX, cfg.keep_versions):
        logger.info("removed old datastore version %s", old)
    return version


def _check_doc_starts(doc_starts: np.ndarray, num_entries: int, where: Path) -> None:
    if doc_starts.ndim != 1 or len(doc_starts) < 2 or doc_starts[0] != 0 or doc_starts[-1] != num_entries \
            or np.any(np.diff(doc_starts) < 0):  # fmt: skip
        raise RunError(f"{where}: {DOC_STARTS_FILE} is not a non-decreasing list from 0 to the {num_entries} entries")


def current_version(root: str | Path) -> Path | None:
    """The published version CURRENT names, else the newest published one, else None."""
    root = Path(root)
    name = publication.read_pointer(root / publication.CURRENT)
    if name is not None and publication.read_manifest(root / name) is not None:
        return root / name
    latest = publication.latest_published(root, PREFIX)
    return None if latest is None else latest[1]


class Datastore:
    """A loaded datastore version: k-nearest-neighbour search returning scores and token values."""

    def __init__(
        self,
        path: Path,
        manifest: dict[str, Any],
        index: FaissIndex | torch_search.TorchIndex,
        keys: np.ndarray,
        values: np.ndarray,
        doc_starts: np.ndarray | None = None,
    ):
        self.path, self.manifest, self.index, self.keys, self.values = path, manifest, index, keys, values
        self.doc_starts = doc_starts
        """[M + 1] entry id of each corpus document's first token, or None (a datastore built before provenance)."""
        self._values = torch.from_numpy(values.astype(np.int64))

    @property
    def num_entries(self) -> int:
        return len(self.values)

    @property
    def metric(self) -> str:
        return self.manifest["metric"]

    @property
    def key_layer(self) -> int:
        """The decoder block its keys were read from (-1: the last; datastores before the option all used it)."""
        return int(self.manifest.get("layer", -1))

    @property
    def has_provenance(self) -> bool:
        return self.doc_starts is not None

    def locate(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """([n] document, [n] position) of entry ``ids``: the document's index in the datastore's corpus and the
        position of the entry's token in ``[BOS] tokens`` (1 = the first token; the ``position`` of tokens.jsonl)."""
        if self.doc_starts is None:
            raise RunError(f"{self.path} records no provenance ({DOC_STARTS_FILE}); rebuild it to locate entries")
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_entries):
            raise ValueError(f"entry ids must be in 0..{self.num_entries - 1}")
        # note: "right" then -1 skips documents with no token (their start equals the next one's)
        docs = np.searchsorted(self.doc_starts, ids, side="right") - 1
        return docs, ids - self.doc_starts[docs] + 1

    def preceding(self, entry: int, num_tokens: int) -> tuple[np.ndarray, bool]:
        """(the up to ``num_tokens`` tokens of its document before ``entry``'s token, whether they reach back to the
        document's start: then BOS + them is all of the document before the token)."""
        doc, _ = self.locate(np.asarray([entry]))
        start = int(self.doc_starts[doc[0]])
        first = max(start, entry - num_tokens)
        return np.asarray(self.values[first:entry]), entry - num_tokens < start

    def _scores(self, queries: Tensor, near: np.ndarray, shape: torch.Size) -> Tensor:
        """[Q, k] scores of the queries against ``near``, the [Q * k, D] keys of their neighbours."""
        keys = torch.from_numpy(np.asarray(near, dtype=np.float32)).view(*shape, -1)
        q = queries.float().cpu()[:, None, :]
        return -((keys - q) ** 2).sum(-1) if self.metric == "l2" else (keys * q).sum(-1)

    def _exact_scores(self, queries: Tensor, ids: Tensor) -> Tensor:
        """[Q, k] exact scores of ``ids`` (valid entry ids) from the stored fp16 keys, gathered from the memmap."""
        return self._scores(queries, self.keys[ids.numpy().ravel()], ids.shape)

    def index_scores(self, queries: Tensor, ids: Tensor) -> Tensor:
        """[Q, k] the index's own scores of entry ``ids`` ([Q, k], -1: none, scored -inf): the compressed keys' (PQ)
        scores for an IVF-PQ datastore, so any neighbours (e.g. the exact ones) can be scored the way approximate
        search scores them (seed 001's exact-neighbours x PQ-scores cell)."""
        valid = ids >= 0
        scores = torch.cat([
            self._scores(queries[first : first + _RECOMPUTE_ROWS],
                         self.index.reconstruct(ids[first : first + _RECOMPUTE_ROWS].clamp(min=0).numpy().ravel()),
                         ids[first : first + _RECOMPUTE_ROWS].shape)
            for first in range(0, len(queries), _RECOMPUTE_ROWS)
        ])  # fmt: skip
        return torch.where(valid, scores, torch.full_like(scores, -torch.inf))

    def search(self, queries: Tensor, k: int, recompute: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        """[Q, D] queries -> ([Q, k'] scores, [Q, k'] token values, [Q, k'] entry ids), best first, k' = min(k, N).

        ``recompute`` replaces the index's (approximate, e.g. PQ) scores with exact ones from the stored keys, as the
        kNN-LM code does; exact indexes need it not. Unfilled slots have score -inf, value 0 and id -1.
        """
        scores, ids = self.index.search(queries.float(), k)
        valid = ids >= 0
        safe = ids.clamp(min=0)
        if recompute:
            scores = torch.cat(
                [
                    self._exact_scores(queries[first : first + _RECOMPUTE_ROWS], safe[first : first + _RECOMPUTE_ROWS])
                    for first in range(0, len(queries), _RECOMPUTE_ROWS)
                ]
            )
            scores = torch.where(valid, scores, torch.full_like(scores, -torch.inf))
        values = torch.where(valid, self._values[safe], torch.zeros_like(safe))
        return scores.float(), values, torch.where(valid, ids, torch.full_like(ids, -1))


def load_datastore(root_or_version: str | Path, index_cfg: IndexConfig | None = None, verify: bool = True) -> Datastore:
    """Opens a datastore folder (its CURRENT version) or one version; with ``verify`` every file is checked against
    the checksums of its manifest first, so a corrupt datastore is refused with a message naming the file."""
    path = Path(root_or_version)
    if not path.is_dir():
        raise RunError(f"datastore not found: {path}")
    version = path if publication.read_manifest(path) is not None else current_version(path)
    if version is None:
        raise RunError(f"{path} holds no published datastore (build one with `realm knnlm build`)")
    manifest = publication.read_manifest(version)
    if manifest is None or manifest.get("format") != FORMAT:
        raise RunError(f"{version} is not a kNN-LM datastore (no {FORMAT} manifest)")
    if verify:
        publication.verify_published(version)
    index = FaissIndex.load(version / FAISS_FILE, index_cfg)
    index.factory = manifest.get("factory", index.factory)  # note: what was built, not the caller's search config
    keys = np.load(version / KEYS_FILE, mmap_mode="r")
    searched = torch_search.searcher(index, lambda: keys, index_cfg, version)  # note: GPU search when asked
    values = np.load(version / VALUES_FILE)
    doc_starts = None
    if DOC_STARTS_FILE in manifest.get("files", {}):
        doc_starts = np.load(version / DOC_STARTS_FILE)
        _check_doc_starts(doc_starts, len(values), version)
    return Datastore(version, manifest, searched, keys, values, doc_starts)
