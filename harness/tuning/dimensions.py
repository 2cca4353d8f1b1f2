"""One tuned key of a search space and its draws: an interval (linear or log), a list of values,
a decay drawn as 1 - beta, a key that may be off (exactly 0), or a list drawn element by element;
and how a drawn value is written as an override (4 significant digits, or exactly).

Read from Hydra's sweep grammar (`dimension_of`) by harness.tuning.search (the spaces a study
declares) and harness.tuning.spaces (the rule over every hyper-parameter).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep

from harness.errors import ConfigError

# The entry of `tune.space` for every optimizer without its own.
DEFAULT_SPACE = "default"


@dataclass(frozen=True)
class Dimension:
    """One tuned key: a log or linear interval, or a list of values. A decay (`complement`) is
    drawn as 1 - value over [low, high]; a key that may be off is exactly 0 with probability
    `zero`; a list (`elements`) is drawn element by element, each a Dimension or a value held
    (harness.tuning.spaces: the search over every hyper-parameter)."""

    key: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    integer: bool = False
    values: tuple[Any, ...] | None = None
    complement: bool = False
    zero: float = 0.0
    elements: tuple[Any, ...] | None = None

    def draw(self, rng: np.random.Generator) -> Any:
        if self.elements is not None:
            return [e.draw(rng) if isinstance(e, Dimension) else e for e in self.elements]
        if self.values is not None:
            return self.values[int(rng.integers(len(self.values)))]
        # the coin for 0 is always tossed: a key's draws stay in step whatever `zero` is
        off = rng.uniform() < self.zero if self.zero else False
        if self.log:
            value = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        else:
            value = rng.uniform(self.low, self.high)
        if off:
            return 0.0
        if self.complement:
            return 1.0 - value
        return round(value) if self.integer else value

    def text(self, value: Any) -> str:
        """A drawn value as an override (`_text`); a decay keeps 4 significant digits of
        1 - value (0.99991234, not 0.9999), a list is written element by element."""
        if self.elements is not None:
            return (
                "["
                + ",".join(
                    e.text(v) if isinstance(e, Dimension) else exact_text(v)
                    for e, v in zip(self.elements, value, strict=True)
                )
                + "]"
            )
        if self.complement:
            return _complement_text(value)
        if self.zero and value == 0:
            return "0.0"  # a float, as the library's default is
        return text_of(value)

    def grid(self, points: int) -> list[Any]:
        if self.values is not None:
            return list(self.values)
        if points == 1:
            ends = [math.sqrt(self.low * self.high) if self.log else (self.low + self.high) / 2]
        elif self.log:
            ends = np.geomspace(self.low, self.high, points).tolist()
        else:
            ends = np.linspace(self.low, self.high, points).tolist()
        return sorted({round(v) for v in ends}) if self.integer else ends


def dimension_of(key: str, spec: Any, where: str) -> Dimension:
    """The dimension of a range in Hydra's sweep grammar (`where`: the entry, for the error)."""
    text = f"{key}={spec}"
    try:
        override = OverridesParser.create().parse_override(text)
    except Exception as exc:  # Hydra's grammar error: its first line says what is wrong
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"{where}: cannot read {text!r} ({first})") from None
    value = override.value()
    if isinstance(value, IntervalSweep):
        low, high, log = value.start, value.end, "log" in value.tags
        if not (isinstance(low, int | float) and isinstance(high, int | float)) or low >= high:
            raise ConfigError(f"{where}: {text} needs numbers low < high")
        if log and low <= 0:
            raise ConfigError(f"{where}: {text}: a log-scale interval needs bounds > 0")
        integer = isinstance(low, int) and isinstance(high, int)
        return Dimension(key, float(low), float(high), log, integer)
    if isinstance(value, ChoiceSweep):
        return Dimension(key, values=tuple(value.list))
    if isinstance(value, RangeSweep):
        return Dimension(key, values=tuple(override.sweep_iterator()))
    raise ConfigError(
        f"{where}: {text} is not a range to search: use interval(a, b), "
        "tag(log, interval(a, b)), choice(...) or range(...)"
    )


def text_of(value: Any) -> str:
    """A drawn value as an override: 4 significant digits for floats (readable folder names;
    the run's config holds exactly this value)."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _complement_text(value: float) -> str:
    """A decay (a momentum, a beta) with 4 significant digits of 1 - value."""
    rest = 1.0 - value
    decimals = 3 + max(0, math.ceil(-math.log10(rest))) if rest > 0 else 4
    text = f"{value:.{decimals}f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def exact_text(value: Any) -> str:
    """A value of a finished run's config as an override that gives that value back exactly
    (a shortlist carries its trials' values into the next phase): 4 significant digits where
    they are exact (every drawn rate), else all of them; lists element by element."""
    if isinstance(value, list | tuple):
        return "[" + ",".join(exact_text(v) for v in value) + "]"
    if value is None:
        return "null"
    if isinstance(value, float):
        short = f"{value:.4g}"
        if float(short) != value:
            return repr(value)
        # a float stays one (0.0, a library's weight decay, not the integer 0)
        return short if any(c in short for c in ".eni") else f"{short}.0"
    return str(value)
