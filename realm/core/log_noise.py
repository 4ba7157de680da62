"""Third-party output a run's log does without unless ``--verbose``: progress bars written for a terminal, and the
expected events that libraries report as faults.

In a log file a tqdm bar is a line of carriage returns per bar (38 of the demo's 218 lines), and three expected
events read like faults: accelerate's ``save_state`` chatter with its "Removed shared tensor" WARNING (the MLM
decoder is tied to the word embeddings, and loading re-ties it), transformers' "LOAD REPORT" table calling the new
retriever projection "MISSING ... newly initialized" (``realm.models.retriever`` says so in one line of its own), and
transformers' "layers were not sharded" (no tensor parallelism is asked for). Everything else a library logs at
WARNING or above still shows, through realm's handler and format.
"""

from __future__ import annotations

import logging
import os
import re

VERBOSE_ENV = "REALM_VERBOSE"
"""Set (to 1) by ``--verbose``; child processes (the index builder) inherit it."""

_LOAD_REPORT_ROW = re.compile(r"^(\S+)\s*\|\s*(MISSING|UNEXPECTED|MISMATCH)\b", re.MULTILINE)


def set_verbose(verbose: bool) -> None:
    """Third-party bars and expected warnings shown (``True``) or quiet, in this process and its children."""
    if verbose:
        os.environ[VERBOSE_ENV] = "1"
    else:
        os.environ.pop(VERBOSE_ENV, None)


def is_verbose() -> bool:
    return os.environ.get(VERBOSE_ENV, "") not in ("", "0")


def _expected_load_report(message: str) -> bool:
    """A transformers LOAD REPORT whose only differences are the ones realm expects: a projection (or other head)
    newly initialised by the retriever and the MLM head an embedder does not use."""
    rows = _LOAD_REPORT_ROW.findall(message)
    return bool(rows) and all(
        (status == "MISSING" and key.startswith("projection.")) or (status == "UNEXPECTED" and key.startswith("cls."))
        for key, status in rows
    )


def is_expected_noise(record: logging.LogRecord) -> bool:
    """Whether ``record`` is one of the expected third-party events quiet without ``--verbose``."""
    name = record.name
    if name.startswith("accelerate.") and record.levelno < logging.WARNING:
        return True  # save_state / load_state chatter; realm logs the checkpoint it published
    message = record.getMessage()
    if name.startswith("accelerate.") and "Removed shared tensor" in message:
        return True
    if name.startswith("transformers."):
        return "layers were not sharded" in message or ("LOAD REPORT" in message and _expected_load_report(message))
    return False


class ExpectedNoiseFilter(logging.Filter):
    """Drops ``is_expected_noise`` records unless ``--verbose`` (checked per record: the flag may come later)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return is_verbose() or not is_expected_noise(record)


def quiet_third_party() -> None:
    """Without ``--verbose``: no datasets, transformers or huggingface_hub progress bars, and transformers' records
    go through the root logger (realm's handler, format and ``ExpectedNoiseFilter``) instead of its own handler."""
    if is_verbose():
        return
    import huggingface_hub.utils
    import transformers.utils.logging
    from datasets.utils import disable_progress_bars

    disable_progress_bars()
    huggingface_hub.utils.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.disable_default_handler()
    transformers.utils.logging.enable_propagation()
