"""A config's validation in one pass: every problem found, then one error that lists them all.

Each config's ``__post_init__`` gathers its problems in a ``Problems`` and raises once, so a user who got three
values wrong reads three lines, not one per attempt (litgpt's ``validate_args`` reports all at once)::

    problems = Problems()
    if not self.k > 0:  # note: `not >` also refuses NaN
        problems.add(f"k must be positive, got {self.k}")
    problems.check(check_precision, self.precision)  # a shared check function that raises ValueError
    problems.raise_if_any()

A check that needs an earlier one to have passed (a value parsed above) stays under an ``if``, or raises early.

The error is a ``ConfigProblems`` (a ``ConfigError``, so a ``ValueError`` too) whose ``problems`` keeps each message
apart: ``realm.core.config`` prefixes each one with where its value came from and gathers the problems of every
section of a config into one error.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from realm.core.errors import ConfigError


def _one_per_line(problems: Sequence[str]) -> str:
    """One problem as it is; several as a count and then one indented line each."""
    if len(problems) == 1:
        return problems[0]
    return f"the config has {len(problems)} problems:\n" + "\n".join(f"  {problem}" for problem in problems)


def problems_of(err: Exception) -> list[str]:
    """The problems an error reports: a ``ConfigProblems``'s list, else its message as the one problem."""
    return list(err.problems) if isinstance(err, ConfigProblems) else [str(err)]


class ConfigProblems(ConfigError):
    """Every problem found in a config, each message on its own line (one problem: just its message)."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        """Each problem's message, in the order the checks found them."""
        super().__init__(_one_per_line(self.problems))

    def __reduce__(self) -> tuple[Any, ...]:  # note: the default would rebuild it from the joined message
        return type(self), (self.problems,)


class Problems:
    """Gathers the problems of one config; ``raise_if_any`` raises them together as a ``ConfigProblems``."""

    __slots__ = ("found",)

    def __init__(self) -> None:
        self.found: list[str] = []
        """Each problem's message, in the order the checks found them."""

    def add(self, message: str) -> None:
        """Records a problem (where a hand-written check would have raised ``ValueError(message)``)."""
        self.found.append(message)

    def check(self, check: Callable[..., object], *args: Any, **kwargs: Any) -> None:
        """Runs ``check`` (a shared check function, or a base class's ``__post_init__``), recording the problems of
        the ``ValueError`` it raises."""
        try:
            check(*args, **kwargs)
        except ValueError as err:
            self.found.extend(problems_of(err))

    def raise_if_any(self) -> None:
        """Raises every problem recorded, in one ``ConfigProblems``; nothing when there is none."""
        if self.found:
            raise ConfigProblems(self.found)
