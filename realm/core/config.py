"""Typed configuration: dataclasses are the schema, YAML is the record, dotted overrides are strict.

Every component declares its own ``@dataclass(kw_only=True, slots=True)`` config next to it and validates it in
``__post_init__`` (``realm.core.checks``: all its problems at once). This module only turns nested dicts (from YAML
and ``--a.b=value`` overrides) into those dataclasses, rejecting unknown keys and mismatched types with a message that
names the offending key path and where its value came from: the command-line override as given, or the YAML file and
the key. The problems of every section are gathered into one ``ConfigError``, one line each.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import re
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

from realm.core.atomic import write_text_atomic
from realm.core.checks import ConfigProblems, problems_of
from realm.core.config_help import did_you_mean, options_help
from realm.core.errors import ConfigError
from realm.core.extras import check_extras
from realm.core.log_noise import set_verbose
from realm.core.overrides import join_key as _join
from realm.core.overrides import leaves, parse_overrides_given, split_overrides, take_flag
from realm.core.overrides import parse_overrides  # noqa: F401 (callers import it from here)
from realm.core.resources import data_dir, packaged_config

T = TypeVar("T")


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


class _Origins:
    """Names a key of a config in errors by where its value came from: the override that set it, as given
    (``override --train.max_steps=-3``), else ``{root}.{key}`` (the YAML file, or the defaults)."""

    def __init__(self, root: str, overrides: dict[str, str] | None = None) -> None:
        self.root = root
        self.overrides = overrides or {}
        """Dotted key -> the override that set it, as given."""

    def _set_by(self, key: str) -> str | None:
        """The override that set ``key`` itself or a section holding it."""
        found = [arg for path, arg in self.overrides.items() if key == path or key.startswith((f"{path}.", f"{path}["))]
        return found[-1] if found else None

    def _touching(self, key: str) -> list[str]:
        """Overrides that set ``key``, a section holding it, or a key inside it."""
        whole = self._set_by(key)
        inside = [arg for path, arg in self.overrides.items() if not key or path.startswith(f"{key}.")]
        return [whole] if whole else inside

    def raw(self, key: str) -> str | None:
        """The text an override gave ``key`` itself (after ``=``), or None when no override set exactly it."""
        arg = self.overrides.get(key)
        if arg is None:
            return None
        return arg.partition("=")[2] if "=" in arg.split(" ", 1)[0] else arg.split(" ", 1)[1]

    def key(self, key: str) -> str:
        """How an error names the value at ``key`` ("" for the whole config)."""
        arg = self._set_by(key)
        if arg is not None:
            return f"override {arg}"
        return _join(self.root, key)

    def section(self, key: str, culprits: list[str] | None) -> str:
        """How an error about section ``key`` names it, given the keys at fault (None: unknown, e.g. a validation
        message that names no key): by the overrides that set them, plus the section when not all of them did."""
        if self._set_by(key) is not None:
            return self.key(key)
        suspects = [key] if culprits is None else culprits
        given = list(dict.fromkeys(arg for k in suspects for arg in self._touching(k)))
        if culprits and all(self._touching(k) for k in culprits):
            return f"override {', '.join(given)}"
        return f"{self.key(key)} with override {', '.join(given)}" if given else self.key(key)


def _coerce(value: Any, tp: Any, key: str, origins: _Origins) -> Any:
    """Checks ``value`` against the annotation ``tp`` and converts it (dicts to dataclasses, ints to floats)."""
    where = origins.key(key)
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key, origins)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(f"{where}: {value!r} matches none of {tp}")
    if origin is typing.Literal:
        if value not in typing.get_args(tp):
            raise ConfigError(f"{where}: {value!r} is not one of {list(typing.get_args(tp))}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        item_tp, *_ = typing.get_args(tp) or (Any,)
        items = [_coerce(v, item_tp, f"{key}[{i}]", origins) for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping for {_type_name(tp)}, got {value!r}")
        return _build(tp, value, key, origins)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        # note: here, so every float of every section is checked once: NaN passes every `x <= 0` check of a
        # __post_init__ (lr=nan reached torch; max_grad_norm=nan turned clipping off) and inf trains on NaN losses
        if not math.isfinite(value):
            raise ConfigError(f"{where}: {float(value)!r} is not a finite number")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str) and isinstance(value, (bool, int, float)) and origins.raw(key) is not None:
            # note: an override's text reads as YAML, so `--train.run_dir=nan` or `=2024` arrive as numbers; a string
            # field takes the text as typed
            return origins.raw(key)
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    if isinstance(tp, type) and not isinstance(value, tp):
        raise ConfigError(f"{where}: expected {_type_name(tp)}, got {value!r}")
    return value


def from_dict(cls: type[T], data: dict[str, Any], where: str = "config") -> T:
    """Builds dataclass ``cls`` from a nested dict; unknown keys and wrong types raise ``ConfigError``."""
    return _build(cls, data, "", _Origins(where))


def _build(cls: type[T], data: dict[str, Any], key: str, origins: _Origins) -> T:
    """``from_dict`` of the section at ``key``; errors are named by ``origins``. Every problem is gathered before one
    ``ConfigProblems`` is raised: unknown keys, each field's type, and each section's own problems. A section whose
    keys or types are wrong is not built, so its checks (and its parent's) wait for those to be fixed."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    errors: list[ConfigError] = []
    unknown = sorted(set(data) - set(fields))
    if unknown:
        where = origins.section(key, [_join(key, name) for name in unknown])
        hint = "".join(did_you_mean(name, fields) for name in unknown)
        errors.append(ConfigError(f"{where}: unknown key(s) {unknown}{hint}; valid keys are {sorted(fields)}"))
    kwargs = {}
    for name, value in data.items():
        if name not in fields:
            continue
        factory = fields[name].default_factory
        try:
            if isinstance(value, dict) and factory is not dataclasses.MISSING and dataclasses.is_dataclass(hints[name]):
                # note: a section given in part keeps the parent's defaults for the rest (e.g. fine-tuning's own
                # optimizer defaults), not the section class's
                value = _merge(to_dict(factory()), value, _join(key, name), origins)
            kwargs[name] = _coerce(value, hints[name], _join(key, name), origins)
        except ConfigError as err:  # note: keep going, so the other keys' and sections' problems are reported too
            errors.append(err)
    if not errors:
        try:
            return cls(**kwargs)
        except (TypeError, ValueError) as err:
            if isinstance(err, ConfigError) and not isinstance(err, ConfigProblems):
                raise
            named = ConfigProblems([_named(problem, cls, key, origins) for problem in problems_of(err)])
            raise named from err
    if len(errors) == 1:
        raise errors[0]
    raise ConfigProblems([problem for err in errors for problem in problems_of(err)])


def _named(problem: str, cls: type, key: str, origins: _Origins) -> str:
    """A check's message on section ``key`` prefixed with where the values it names came from."""
    # note: check messages name the fields they check, which tells whose value is at fault
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    named = [_join(key, name) for name in names if re.search(rf"\b{re.escape(name)}\b", problem)]
    return f"{origins.section(key, named or None)}: {problem}"


def to_dict(config: Any) -> dict[str, Any]:
    """Plain nested dict of a config dataclass, suitable for YAML and experiment trackers."""
    return dataclasses.asdict(config)


def _merge(base: dict[str, Any], update: dict[str, Any], key: str, origins: _Origins) -> dict[str, Any]:
    """Recursively merges ``update`` into a copy of ``base``; a section on one side and a scalar on the other is an
    error (``train: 5`` in a file must not be silently replaced by an override's section and its defaults)."""
    out = dict(base)
    for name, value in update.items():
        old = out.get(name)
        if isinstance(value, dict) and isinstance(old, dict):
            out[name] = _merge(old, value, _join(key, name), origins)
        elif old is not None and isinstance(value, dict) != isinstance(old, dict):
            scalar = old if isinstance(value, dict) else value
            raise ConfigError(f"{origins.key(_join(key, name))}: expected a section (a mapping), got {scalar!r}")
        else:
            out[name] = value
    return out


def merge_sections(base: dict[str, Any], update: dict[str, Any], where: str = "config") -> dict[str, Any]:
    """``update`` merged into a copy of ``base`` section by section (``update`` wins on a shared key; a section
    against a scalar is a ``ConfigError`` naming ``where``): how overrides combine with a file's values."""
    return _merge(base, update, "", _Origins(where))


def resolve_config_path(path: str | Path) -> Path:
    """``path`` as given when it names a file or is absolute (a user's own config wins), else the packaged recipe of
    that name (``configs/pretrain/tiny.yaml`` from any directory, installed or in a checkout:
    ``realm.core.resources``), else ``path`` as given (which ``read_yaml`` reports missing)."""
    path = Path(path)
    if path.is_file() or path.is_absolute():
        return path
    return packaged_config(path) or path


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = resolve_config_path(path)
    if path.is_dir():
        raise ConfigError(f"config file {path} is a directory, not a YAML file")
    if not path.is_file():
        shipped = f" (nor among the packaged ones in {data_dir('configs')})" if path.parts[:1] == ("configs",) else ""
        raise ConfigError(f"config file not found: {path}{shipped}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: invalid YAML: {err}") from err
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data


def load_config(cls: type[T], path: str | Path | None = None, overrides: list[str] | dict | None = None) -> T:
    """Loads ``cls`` from an optional YAML file plus dotted overrides (command-line strings or a nested dict).

    An error names where the bad value came from: the override as given (``override --train.max_steps=-3``), else
    the file and the key (``configs/x.yaml.train.max_steps``).
    """
    data = read_yaml(path) if path is not None else {}
    if isinstance(overrides, list):
        overrides, given = parse_overrides_given(overrides)
    else:
        overrides = overrides or {}
        given = {key: f"{key}={value!r}" for key, value in leaves(overrides)}
    origins = _Origins(str(path) if path else "config", given)
    return _build(cls, _merge(data, overrides, "", origins), "", origins)


def save_config(config: Any, path: str | Path) -> None:
    """Writes the resolved config as YAML (atomically and durably, so a reader never sees half a file)."""
    write_text_atomic(path, yaml.safe_dump(to_dict(config), sort_keys=False))


def config_from_command_line(cls: type[T], argv: list[str] | None, prog: str, description: str, *,
                             config_required: bool = False, default_config: str | None = None,
                             passthrough: tuple[str, type] | None = None) -> T:  # fmt: skip
    """The one option style of every job, process and pipeline: ``--config FILE.yaml`` (``default_config`` when none
    is given) plus ``--section.key=value`` overrides; ``--help`` lists every key with its value (the default config's
    where there is one) and its field's docstring; ``--print_config`` prints the resolved config as YAML and exits 0.
    ``passthrough=(field, stage_cls)``: overrides of ``stage_cls``'s sections that ``cls`` lacks are gathered, as
    given, into ``field`` (a pipeline's ``--train.*`` for its pre-training stage), a dict of sections. The optional
    packages the config needs are checked here (``realm.core.extras``)."""
    parser = argparse.ArgumentParser(prog=prog, description=description, allow_abbrev=False, add_help=False,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("-h", "--help", action="store_true", help="show this help message and exit")
    parser.add_argument("--verbose", action="store_true",
                        help="third-party progress bars and expected warnings too (quiet by default)")  # fmt: skip
    parser.add_argument("--config", default=default_config, metavar="FILE.yaml",
                        help="YAML config (see configs/); --section.key=value overrides any of its keys")  # fmt: skip
    printing, argv = take_flag(list(argv or []), "--print_config", "--print-config")
    verbose, argv = take_flag(argv, "--verbose")
    if verbose:  # note: before the command's init_logging, and inherited by its child processes
        set_verbose(True)
    args, overrides = parser.parse_known_args(argv)
    if args.help:
        source = args.config or ""
        defaults = load_config(cls, source) if source else cls()
        text = f"{parser.format_help()}\n{options_help(defaults, source)}"
        if passthrough:
            heads = ", ".join(sorted(_sections(cls, passthrough)))
            stage = _type_name(passthrough[1])
            text += f"\n  --SECTION.key=value of {stage}'s sections ({heads}) go to {passthrough[0]}"
        with contextlib.suppress(BrokenPipeError):  # `realm train --help | head`
            print(text)
        raise SystemExit(0)
    if config_required and not args.config:
        parser.error("the following arguments are required: --config")
    if passthrough:
        overrides, staged = split_overrides(overrides, _sections(cls, passthrough))
        overrides += _passed_through(cls, passthrough[0], staged)
    config = load_config(cls, args.config, overrides)
    if printing:
        print(yaml.safe_dump(to_dict(config), sort_keys=False), end="")
        raise SystemExit(0)
    # note: here, before the command does any work: a setting whose package is missing is one line now, not a
    # traceback after minutes of data preparation
    check_extras(config)
    return config


def _sections(cls: type, passthrough: tuple[str, type]) -> set[str]:
    """The sections of a passthrough stage config (its dataclass fields), less the pipeline's own keys."""
    return {f.name for f in dataclasses.fields(passthrough[1])} - {f.name for f in dataclasses.fields(cls)}


def _passed_through(cls: type, field: str, staged: list[str]) -> list[str]:
    """A stage's overrides as overrides of ``cls``'s ``field``, a dict of sections (``realm demo``'s and ``realm
    real-text``'s ``pretrain_overrides``): each one's key under it, where they merge with that dict's other keys (a
    config's or a ``--field={...}``)."""
    if typing.get_origin(typing.get_type_hints(cls)[field]) is not dict:
        raise TypeError(f"{cls.__name__}.{field} must be a dict of config sections to take a stage's overrides")
    renamed, is_value = [], False
    for arg in staged:  # note: a key's value given as the next word (``--train.seed 3``) stays as it is
        renamed.append(arg if is_value else f"--{field}.{arg[2:]}")
        is_value = not is_value and "=" not in arg
    return renamed
