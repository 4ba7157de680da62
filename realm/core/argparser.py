"""The argparse parser of the commands that take plain options (``realm world``, ``vocab``, ``blocks``, ``inspect``,
``report``, ``evaluate``, ``export``, ...), in the spelling of the config commands.

A config command reads ``--max_block_length`` and ``--max-block-length`` alike (``realm.core.config``), so each
``--a-b`` option here also answers to ``--a_b`` (and the reverse); a mistyped option gets a did-you-mean, as a
mistyped config key does.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from realm.core.config_help import did_you_mean


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose long options take ``-`` or ``_`` alike and whose unknown-option error
    names the closest option; abbreviations are off (a prefix is not silently taken for an option)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("epilog", "Options take '-' or '_' alike (--max-block-length or --max_block_length).")
        super().__init__(*args, **kwargs)

    def _add_action(self, action: argparse.Action) -> argparse.Action:
        # note: the twin spelling only joins the lookup table, so the help, the usage and ``dest`` keep the option's
        # own spelling (``--max-block-length`` -> ``args.max_block_length``); a mutually exclusive group's options
        # come through here too
        action = super()._add_action(action)
        for name in action.option_strings:
            if name.startswith("--"):
                for twin in ("--" + name[2:].replace("-", "_"), "--" + name[2:].replace("_", "-")):
                    self._option_string_actions.setdefault(twin, action)
        return action

    def error(self, message: str) -> Any:
        found = re.match(r"unrecognized arguments: (\S+)", message)
        if found:
            options = [name for name in self._option_string_actions if name.startswith("--")]
            message += did_you_mean(found.group(1).split("=", 1)[0], options)
        return super().error(message)
