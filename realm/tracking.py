"""Experiment trackers (W&B, TensorBoard) through accelerate, and retrieval tables for looking inside a run.

Scalar metrics keep flowing through ``realm.logging.MetricsLogger`` (``metrics.jsonl`` plus ``accelerator.log``);
this module only decides which trackers accelerate starts, keeps everything W&B writes inside the run directory
(offline W&B otherwise writes under the home directory, DESIGN.md), and builds the periodic retrieval tables: for a
few queries of a step, the candidates, p(z|x), p(y|z,x) and whether each block contains the masked answer.

W&B runs are grouped by the run name, so the trainer and the index builder (another process sharing the run
directory) appear together. ``wandb`` is imported lazily: a run with ``report_to: none`` never imports it.
"""

from __future__ import annotations

import json
import logging
import netrc
import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlsplit

import torch

logger = logging.getLogger(__name__)

REPORT_TO = ("none", "wandb", "tensorboard", "all")
WANDB_MODES = ("auto", "online", "offline", "disabled")
TABLE_KEY = "inspect/retrievals"
"""W&B key of the retrieval table."""
RETRIEVALS_FILE = "retrievals.jsonl"
"""Rows of every retrieval table, one json object a line, under the run directory (the HTML report reads it)."""
SNIPPET_CHARS = 120
NULL_TITLE = "(null document)"
EMPTY_TITLE = "(empty)"

_WANDB_DIR_VARS = ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_CONFIG_DIR", "WANDB_ARTIFACT_DIR")
_OWNED_VAR = "REALM_WANDB_ENV_OWNED"
"""Names of the ``WANDB_*_DIR`` variables this module set (inherited by a child builder), as opposed to the user's."""


@dataclass(kw_only=True, slots=True)
class TrackingConfig:
    """Which trackers a run reports to, and how often it logs retrieval tables."""

    report_to: str = "none"
    """``none``, ``wandb``, ``tensorboard`` or ``all`` (both; ``metrics.jsonl`` is always written)."""
    project: str = "realm"
    """W&B project (and TensorBoard sub-folder)."""
    run_name: str = ""
    """W&B run name and group; empty: the run directory's name. The index builder joins the same group."""
    wandb_mode: str = "auto"
    """``auto``: ``online`` if a W&B API key is configured (``WANDB_API_KEY`` or a netrc entry; no network check),
    else ``offline`` (sync later with ``wandb sync RUN/wandb/offline-run-*``); or ``online``/``offline``/``disabled``.
    A ``WANDB_MODE`` set in the environment wins over ``auto``."""
    inspect_interval: int = 0
    """Steps between retrieval tables (``RUN/retrievals.jsonl`` and W&B ``inspect/retrievals``); 0: never."""
    num_inspect_rows: int = 8
    """Queries per retrieval table (the first ones of the step's batch on the main process)."""

    def __post_init__(self) -> None:
        if self.report_to not in REPORT_TO:
            raise ValueError(f"report_to must be one of {REPORT_TO}, got {self.report_to!r}")
        if self.wandb_mode not in WANDB_MODES:
            raise ValueError(f"wandb_mode must be one of {WANDB_MODES}, got {self.wandb_mode!r}")
        if not self.project.strip():
            raise ValueError("project must be non-empty")
        if self.inspect_interval < 0:
            raise ValueError(f"inspect_interval must be >= 0, got {self.inspect_interval}")
        if self.num_inspect_rows <= 0:
            raise ValueError(f"num_inspect_rows must be positive, got {self.num_inspect_rows}")

    @property
    def uses_wandb(self) -> bool:
        return self.report_to in ("wandb", "all")

    def is_inspect_due(self, step: int) -> bool:
        """Whether the loop logs a retrieval table after optimizer step ``step``."""
        return self.inspect_interval > 0 and step > 0 and step % self.inspect_interval == 0


# ------------------------------------------------------------------------------------------- trackers


def tracker_names(cfg: TrackingConfig) -> list[str]:
    """accelerate ``log_with`` names. An explicitly requested tracker that is not installed is an error; ``all``
    keeps the installed ones (with a warning for the others)."""
    from accelerate.utils import is_tensorboard_available, is_wandb_available

    wanted = {"none": [], "wandb": ["wandb"], "tensorboard": ["tensorboard"], "all": ["wandb", "tensorboard"]}
    available = {"wandb": is_wandb_available(), "tensorboard": is_tensorboard_available()}
    names = []
    for name in wanted[cfg.report_to]:
        if available[name]:
            names.append(name)
        elif cfg.report_to == "all":
            logger.warning("report_to=all: %s is not installed, not reporting to it", name)
        else:
            raise ImportError(f"report_to={name} but the {name} package is not installed (pip install {name})")
    return names


def resolve_run_name(cfg: TrackingConfig, run_dir: str | Path) -> str:
    return cfg.run_name or Path(run_dir).resolve().name


def has_wandb_api_key() -> bool:
    """Whether W&B credentials are configured locally (env or netrc); reads files only, never the network."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = urlsplit(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").netloc
    path = os.environ.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")
    try:
        return netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def resolve_wandb_mode(cfg: TrackingConfig) -> str:
    """The ``mode`` given to ``wandb.init``: ``auto`` becomes the environment's ``WANDB_MODE`` if set, else online
    with credentials and offline without (never a login prompt)."""
    if cfg.wandb_mode != "auto":
        return cfg.wandb_mode
    env_mode = os.environ.get("WANDB_MODE", "").strip().lower()
    if env_mode in ("online", "offline", "disabled"):
        return env_mode
    if env_mode == "dryrun":
        return "offline"
    return "online" if has_wandb_api_key() else "offline"


def configure_wandb_env(run_dir: str | Path) -> dict[str, str]:
    """Points W&B's directories into ``RUN/wandb`` (before wandb is imported or initialised).

    Variables the user exported are kept; ones this module set earlier (in this process, or in the parent that
    spawned the builder: listed in ``REALM_WANDB_ENV_OWNED``) are re-pointed at ``run_dir``. Returns the values.
    """
    base = Path(run_dir).resolve() / "wandb"
    targets = {
        "WANDB_DIR": Path(run_dir).resolve(),  # wandb appends "wandb/" itself
        "WANDB_CACHE_DIR": base / ".cache",
        "WANDB_DATA_DIR": base / ".data",
        "WANDB_CONFIG_DIR": base / ".config",
        "WANDB_ARTIFACT_DIR": base / "artifacts",
    }
    owned = set(filter(None, os.environ.get(_OWNED_VAR, "").split(",")))
    for name, path in targets.items():
        if name in os.environ and name not in owned:
            continue  # the user's choice
        path.mkdir(parents=True, exist_ok=True)
        os.environ[name] = str(path)
        owned.add(name)
    os.environ[_OWNED_VAR] = ",".join(sorted(owned))
    return {name: os.environ[name] for name in _WANDB_DIR_VARS}


def wandb_init_kwargs(cfg: TrackingConfig, run_dir: str | Path, job_type: str) -> dict[str, Any]:
    """Keyword arguments of ``wandb.init`` (besides ``project``) for one process of the run."""
    name = resolve_run_name(cfg, run_dir)
    return {
        "dir": str(Path(run_dir).resolve()),
        "name": name if job_type == "trainer" else f"{name}-{job_type}",
        "group": name,
        "job_type": job_type,
        "mode": resolve_wandb_mode(cfg),
    }


def accelerator_kwargs(cfg: TrackingConfig, run_dir: str | Path) -> dict[str, Any]:
    """Keyword arguments for ``Accelerator(...)``: ``log_with`` and a project configuration rooted at the run
    directory (TensorBoard writes to ``RUN/tensorboard/<project>``); ``{}`` when reporting to no tracker."""
    from accelerate.utils import ProjectConfiguration

    names = tracker_names(cfg)
    if not names:
        return {}
    if "wandb" in names:
        configure_wandb_env(run_dir)
    run_dir = Path(run_dir)
    return {
        "log_with": names,
        "project_config": ProjectConfiguration(project_dir=str(run_dir), logging_dir=str(run_dir / "tensorboard")),
    }


def flatten_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"optim": {"lr": 1e-4}}`` -> ``{"optim.lr": 1e-4}`` (the override syntax); lists and other non-scalars
    become strings, so TensorBoard's hparams accept them too."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_config(value, f"{name}."))
        elif value is None or isinstance(value, (bool, int, float, str)):
            flat[name] = value
        else:
            flat[name] = str(value)
    return flat


def init_trackers(
    accelerator: Any, cfg: TrackingConfig, run_dir: str | Path, config: Mapping[str, Any], job_type: str = "trainer"
) -> None:
    """Starts the accelerator's trackers (created with ``accelerator_kwargs``) with the flattened run config."""
    if not accelerator.log_with:
        return
    init_kwargs: dict[str, dict] = {}
    if any(str(t) == "wandb" for t in accelerator.log_with):
        configure_wandb_env(run_dir)
        init_kwargs["wandb"] = wandb_init_kwargs(cfg, run_dir, job_type=job_type)
    accelerator.init_trackers(cfg.project, config=flatten_config(config), init_kwargs=init_kwargs)


def init_builder_run(cfg: TrackingConfig, run_dir: str | Path, config: Mapping[str, Any] | None = None) -> Any:
    """A W&B run of the index builder in the trainer's group (``job_type=index_builder``), or None without W&B."""
    if not cfg.uses_wandb or "wandb" not in tracker_names(cfg):
        return None
    configure_wandb_env(run_dir)
    import wandb

    return wandb.init(
        project=cfg.project,
        config=flatten_config(config) if config else None,
        **wandb_init_kwargs(cfg, run_dir, job_type="index_builder"),
    )


def log_builder(run: Any, metrics: Mapping[str, Any], step: int) -> None:
    """Logs the builder's metrics (e.g. ``index/build_s`` at the index version's step); no-op without a run."""
    if run is not None:
        run.log(dict(metrics), step=step)


def finish_builder_run(run: Any) -> None:
    if run is not None:
        run.finish()


# ------------------------------------------------------------------------------------------- retrieval tables


def normalize_answer_text(text: str) -> str:
    """Lower-cased, accents stripped, words and punctuation separated by single spaces, so decoded wordpieces
    (``u . s .``) and raw block text (``U.S.``) compare equal."""
    text = unicodedata.normalize("NFKD", text.lower())
    text = "".join(c for c in text if not unicodedata.combining(c))
    return " ".join(re.findall(r"\w+|[^\w\s]", text))


def contains_answer(text: str, answer: str) -> bool:
    """Whether ``answer`` occurs in ``text`` on word boundaries (after ``normalize_answer_text``)."""
    answer = normalize_answer_text(answer)
    return bool(answer) and f" {answer} " in f" {normalize_answer_text(text)} "


def _decode(tokenizer: Any, ids: list[int]) -> str:
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False).strip()


@torch.no_grad()
def retrieval_rows(
    batch: Any,
    output: Any,
    store: Any,
    tokenizer: Any,
    *,
    index_version: int,
    staleness: int,
    step: int,
    max_rows: int,
) -> list[dict[str, Any]]:
    """One row per query (the first ``max_rows`` of ``batch``) describing what was retrieved and how it was used.

    Args:
        batch: A ``RealmBatch`` with candidates; ``output``: the model's ``RealmOutput`` for it.
        store: A ``BlockStore`` (titles and texts from its ``.blocks`` dataset).

    Returns:
        Rows with ``step``, ``index_version``, ``staleness``, ``example_id``, ``query`` ([MASK] kept), ``gold``,
        ``prediction``, ``closed_book``, ``correct`` and ``slots``: one dict per slot (0 = null document) with
        ``block_id``, ``title``, ``snippet``, ``p_z`` (p(z|x)), ``p_y`` (p(gold span|z,x), the product over its
        wordpieces) and ``has_gold`` (the block's text contains the gold span). The only device syncs of the
        inspection path happen here.
    """
    cand = batch.candidates
    if cand is None:
        raise ValueError("batch has no candidates: retrieval_rows needs the batch the model was run on")
    n = min(max_rows, batch.query_input_ids.shape[0])
    # one transfer per tensor
    query_ids = batch.query_input_ids[:n].cpu().tolist()
    query_mask = batch.query_attention_mask[:n].cpu().tolist()
    target_mask = batch.target_mask[:n].cpu().bool()
    targets = batch.target_ids[:n].cpu()
    predictions = output.predictions[:n].cpu()
    closed_book = output.closed_book_predictions[:n].cpu()
    p_z = torch.softmax(output.retrieval_logits[:n].detach().float(), dim=-1).cpu()
    log_p_y = (output.token_log_probs[:n].detach().float() * batch.target_mask[:n, None, :].float()).sum(-1).cpu()
    block_ids = cand.block_ids[:n].cpu().tolist()
    slot_mask = cand.slot_mask[:n].cpu().tolist()
    example_ids = batch.example_ids[:n].cpu().tolist()

    present = sorted({i for row in block_ids for i in row if i >= 0})
    texts = {}
    if present:
        columns = store.blocks[present]
        texts = {i: (t, x) for i, t, x in zip(present, columns["title"], columns["text"])}
    drop = set(tokenizer.all_special_ids) - {tokenizer.mask_token_id}

    rows = []
    for b in range(n):
        query = [t for t, m in zip(query_ids[b], query_mask[b]) if m and t not in drop]
        tmask = target_mask[b]
        gold = _decode(tokenizer, targets[b][tmask].tolist())
        prediction = _decode(tokenizer, predictions[b][tmask].tolist())
        slots = []
        for k, block in enumerate(block_ids[b]):
            if k == 0:
                title, text = NULL_TITLE, ""
            elif block < 0 or not slot_mask[b][k]:
                title, text = EMPTY_TITLE, ""
            else:
                title, text = texts[block]
            slots.append(
                {
                    "block_id": int(block),
                    "title": title,
                    "snippet": text[:SNIPPET_CHARS],
                    "p_z": float(p_z[b, k]),
                    "p_y": float(torch.exp(log_p_y[b, k])),
                    "has_gold": k > 0 and block >= 0 and contains_answer(text, gold),
                }
            )
        rows.append(
            {
                "step": int(step),
                "index_version": int(index_version),
                "staleness": int(staleness),
                "example_id": int(example_ids[b]),
                "query": _decode(tokenizer, query),
                "gold": gold,
                "prediction": prediction,
                "closed_book": _decode(tokenizer, closed_book[b][tmask].tolist()),
                "correct": bool(torch.equal(predictions[b][tmask], targets[b][tmask])),
                "slots": slots,
            }
        )
    return rows


def flatten_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row with its slots spread into ``slot{k}_title``, ``slot{k}_snippet``, ``slot{k}_p_z``, ``slot{k}_p_y``,
    ``slot{k}_has_gold`` columns (for a table)."""
    flat = {key: value for key, value in row.items() if key != "slots"}
    for k, slot in enumerate(row.get("slots", [])):
        for field in ("title", "snippet", "p_z", "p_y", "has_gold"):
            flat[f"slot{k}_{field}"] = slot[field]
    return flat


def _table(rows: list[Mapping[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    flat = [flatten_row(r) for r in rows]
    columns: list[str] = []
    for f in flat:
        columns.extend(c for c in f if c not in columns)
    return columns, [[f.get(c) for c in columns] for f in flat]


def log_retrieval_table(accelerator: Any, rows: list[Mapping[str, Any]], step: int, run_dir: str | Path) -> None:
    """Appends ``rows`` to ``RUN/retrievals.jsonl`` and, when a W&B tracker is active, logs them as a
    ``wandb.Table`` under ``inspect/retrievals`` at ``step``. Main process only (others return)."""
    if not rows or not accelerator.is_main_process:
        return
    path = Path(run_dir) / RETRIEVALS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write("".join(json.dumps(dict(r)) + "\n" for r in rows))
    log_wandb_table(accelerator, TABLE_KEY, _table(list(rows)), step)


def log_wandb_table(accelerator: Any, key: str, table: tuple[list[str], list[list[Any]]], step: int) -> None:
    """Logs ``(columns, data)`` as a ``wandb.Table`` under ``key`` when a W&B tracker is active."""
    for tracker in accelerator.trackers:
        if tracker.name == "wandb":
            tracker.log_table(key, columns=table[0], data=table[1], step=step)


PREDICTIONS_KEY = "eval/predictions"
PREDICTION_COLUMNS = ("question", "answers", "prediction", "correct", "prediction_title")


def prediction_rows(records: list[Mapping[str, Any]], num_blocks: int = 5) -> tuple[list[str], list[list[Any]]]:
    """A QA predictions table: the question, gold answers, prediction and, for the top ``num_blocks`` retrieved
    blocks, title, retriever score and whether it has an answer (``records`` from ``realm.qa_evaluation``)."""
    columns = [*PREDICTION_COLUMNS]
    for k in range(num_blocks):
        columns += [f"block{k}_title", f"block{k}_score", f"block{k}_has_answer"]
    data = []
    for r in records:
        titles = r["titles"]
        title = titles[r["block_ids"].index(r["prediction_block"])] if r["prediction_block"] in r["block_ids"] else ""
        row = [r["question"], " | ".join(r["answers"]), r["prediction"], r["correct"], title]
        for k in range(num_blocks):
            present = k < len(titles)
            row += [titles[k] if present else None, r["scores"][k] if present else None,
                    r["has_answer"][k] if present else None]  # fmt: skip
        data.append(row)
    return columns, data
