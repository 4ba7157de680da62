"""What a command's ``--help`` and ``--print_config`` show of a config, and the did-you-mean of a mistyped name.

Each field's description is its docstring, the string literal under it in the class body (STYLE.md: a docstring per
field); Python keeps no such docstring at run time, so it is read from the class's source with ``ast``. Defaults are
shown as YAML (``null``, ``true``, ``''``, ``[a, b]``), the way a config file or ``--print_config`` writes them.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import inspect
import textwrap
from typing import Any, Iterable

import yaml


@functools.lru_cache(maxsize=None)
def _own_field_docs(cls: type) -> dict[str, str]:
    """Field name -> docstring of the fields ``cls``'s own body declares ({} when its source cannot be read)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs = {}
    for node, after in zip(body, body[1:]):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
            docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


def field_docs(cls: type) -> dict[str, str]:
    """Field name -> docstring of every documented field of dataclass ``cls``, its bases' included."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            docs |= _own_field_docs(klass)
    return docs


def yaml_value(value: Any) -> str:
    """``value`` on one line as YAML writes it (``null``, ``true``, ``''``, ``1.0e-05``, ``[a, b]``, ``{}``)."""
    plain = [dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for v in value] if isinstance(value, list) \
        else value
    text = yaml.safe_dump(plain, default_flow_style=True, width=10**9, sort_keys=False).strip()
    return text.removesuffix("...").strip()


def options_help(config: Any, source: str = "") -> str:
    """Every dotted key of ``config`` (a config instance, or a class: its defaults), one per line with its value as
    YAML, each followed by its field's docstring: a command's ``--help``. ``source`` names where the values come from
    (a default config file) when they are not the dataclass defaults."""
    config = config() if isinstance(config, type) else config
    where = f"{source}'s values" if source else "defaults"
    lines = ["options: --section.key=value (or --section.key value; '-' or '_' in keys) overrides the YAML config;",
             f"--print_config prints the resolved config as YAML and exits ({where} shown):"]  # fmt: skip

    def walk(node: Any, prefix: str) -> None:
        docs = field_docs(type(node))
        for f in dataclasses.fields(node):
            value = getattr(node, f.name)
            if dataclasses.is_dataclass(value):
                walk(value, f"{prefix}{f.name}.")
                continue
            lines.append(f"  --{prefix}{f.name}={yaml_value(value)}")
            if f.name in docs:
                lines.extend(textwrap.wrap(docs[f.name], 112, initial_indent="      ", subsequent_indent="      "))

    walk(config, "")
    return "\n".join(lines)


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices`` to a mistyped ``name``, or "" when none is close."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
