"""Experiment trackers (W&B, TensorBoard) through accelerate, and retrieval tables for looking inside a run.

Scalar metrics keep flowing through ``realm.core.logging.MetricsLogger`` (``metrics.jsonl`` plus ``accelerator.log``);
this module only decides which trackers accelerate starts, keeps everything W&B writes inside the run directory
(offline W&B otherwise writes under the home directory, DESIGN.md), and builds the periodic retrieval tables: for a
few queries of a step, the candidates, p(z|x), p(y|z,x) and whether each block contains the masked answer.

W&B runs are grouped by the run name, so the trainer and the index builder (another process sharing the run
directory) appear together. ``wandb`` is imported lazily: a run with ``report_to: none`` never imports it.
"""

from __future__ import annotations

import logging
import netrc
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlsplit

from realm.core.checks import Problems

logger = logging.getLogger(__name__)

REPORT_TO = ("none", "wandb", "tensorboard", "all")
WANDB_MODES = ("auto", "online", "offline", "disabled")

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
        problems = Problems()
        if self.report_to not in REPORT_TO:
            problems.add(f"report_to must be one of {REPORT_TO}, got {self.report_to!r}")
        if self.wandb_mode not in WANDB_MODES:
            problems.add(f"wandb_mode must be one of {WANDB_MODES}, got {self.wandb_mode!r}")
        if not self.project.strip():
            problems.add("project must be non-empty")
        if self.inspect_interval < 0:
            problems.add(f"inspect_interval must be >= 0, got {self.inspect_interval}")
        if self.num_inspect_rows <= 0:
            problems.add(f"num_inspect_rows must be positive, got {self.num_inspect_rows}")
        problems.raise_if_any()

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


def init_builder_run(cfg: TrackingConfig, run_dir: str | Path, config: Mapping[str, Any] | None = None,
                     job_type: str = "index_builder") -> Any:  # fmt: skip
    """A W&B run of a process besides the trainer in the trainer's group (the index builder; ``job_type``), or None
    without W&B."""
    if not cfg.uses_wandb or "wandb" not in tracker_names(cfg):
        return None
    configure_wandb_env(run_dir)
    import wandb

    return wandb.init(
        project=cfg.project,
        config=flatten_config(config) if config else None,
        **wandb_init_kwargs(cfg, run_dir, job_type=job_type),
    )


def log_summary_run(cfg: TrackingConfig, run_dir: str | Path, summary: Mapping[str, Any]) -> None:
    """A pipeline's end figures (what it writes to ``summary.json``) as the summary of a short W&B run in the run's
    group (``job_type=pipeline``): each stage's own run has finished by the time they exist. No-op without W&B."""
    run = init_builder_run(cfg, run_dir, job_type="pipeline")
    if run is not None:
        run.summary.update(dict(summary))
        run.finish()


def log_builder(run: Any, metrics: Mapping[str, Any], step: int) -> None:
    """Logs the builder's metrics (e.g. ``index/build_s`` at the index version's step); no-op without a run."""
    if run is not None:
        run.log(dict(metrics), step=step)


def finish_builder_run(run: Any) -> None:
    if run is not None:
        run.finish()


# ------------------------------------------------------------------------------------------- retrieval tables


def log_wandb_table(accelerator: Any, key: str, table: tuple[list[str], list[list[Any]]], step: int) -> None:
    """Logs ``(columns, data)`` as a ``wandb.Table`` under ``key`` when a W&B tracker is active."""
    for tracker in accelerator.trackers:
        if tracker.name == "wandb":
            tracker.log_table(key, columns=table[0], data=table[1], step=step)
