"""Dotted command-line overrides (``--optim.lr=1e-4``, ``--index.refresh_interval 50``) as the nested dict a config
is merged with (``realm.core.config.load_config``), and the command line's other words: a flag taken out, a pipeline's
stage sections split off."""

from __future__ import annotations

from typing import Any, Iterator

import yaml

from realm.core.errors import ConfigError


def join_key(key: str, name: str) -> str:
    """``key.name`` (``name`` at the top level)."""
    return f"{key}.{name}" if key else name


def parse_overrides(args: list[str]) -> dict[str, Any]:
    """Turns ``["--optim.lr=1e-4", "--index.refresh_interval", "50"]`` into a nested dict.

    Values are parsed as YAML scalars (so ``1e-4`` is a float and ``true`` a bool); anything that is not a
    ``--dotted.key=value`` pair is an error rather than being silently ignored.
    """
    return parse_overrides_given(args)[0]


def parse_overrides_given(args: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """``parse_overrides`` and, for errors, each dotted key's override as given."""
    nested: dict[str, Any] = {}
    given: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--"):
            raise ConfigError(f"override {arg!r}: expected --section.key=value")
        key, sep, raw = arg[2:].partition("=")
        if not sep:
            if i + 1 >= len(args):
                raise ConfigError(f"override {arg!r} has no value")
            raw = args[i + 1]
            i += 1
        i += 1
        value = parse_scalar(raw)
        node = nested
        parts = key.replace("-", "_").split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {arg!r} conflicts with an earlier override")
        node[parts[-1]] = value
        given[".".join(parts)] = arg if sep else f"{arg} {raw}"
    return nested, given


def leaves(nested: dict[str, Any], key: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of every value of a nested dict that is not itself a dict."""
    for name, value in nested.items():
        if isinstance(value, dict) and value:
            yield from leaves(value, join_key(key, name))
        else:
            yield join_key(key, name), value


def parse_scalar(raw: str) -> Any:
    """A YAML scalar, except that ``2e-3`` is a float (YAML 1.1 would read it as a string)."""
    if raw == "":
        return ""
    value = yaml.safe_load(raw)
    if isinstance(value, str):
        try:
            return float(raw)
        except ValueError:
            return value
    return value


def split_overrides(args: list[str], heads: set[str]) -> tuple[list[str], list[str]]:
    """``args`` split into the overrides whose first key is not in ``heads`` and those whose first key is (each with
    its value, ``--train.max_steps 3`` as two words included), keeping their order."""
    kept: list[str] = []
    taken: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        key, sep, _ = arg[2:].partition("=")
        words = args[i : i + (1 if sep or not arg.startswith("--") else 2)]
        head = key.replace("-", "_").split(".")[0]
        (taken if arg.startswith("--") and head in heads else kept).extend(words)
        i += len(words)
    return kept, taken


def take_flag(argv: list[str], *names: str) -> tuple[bool, list[str]]:
    """Whether any of the flags ``names`` is in ``argv``, and ``argv`` without them."""
    rest = [arg for arg in argv if arg not in names]
    return len(rest) != len(argv), rest
