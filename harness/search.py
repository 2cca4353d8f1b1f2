"""Search spaces and their trials: what a tuning study runs.

A tuning study (`hydra/sweeper=tune`, hydra_plugins.harness_sweeper) tunes every combination of
its grid axes (net, optimizer, ...) on its own, with a stated budget of trials drawn from the
search space of that combination's optimizer. The protocol lives in the config's `tune` node
(conf/tune/): not part of any run's identity, since each run's config holds the values its
trial drew.

    tune:
      method: random        # random: seeded draws; grid: evenly spaced points
      budget: 10            # trials per combination
      seed: 0               # of the random draws
      space:                # per optimizer choice, `default` for any other
        default: {optimizer.lr: "tag(log, interval(1e-4, 3.0))"}
        yellowfin: {}       # nothing to tune: one trial at its defaults

Each key's range is written in Hydra's sweep grammar, as Hydra's Optuna sweeper reads it:
`interval(a, b)` (uniform), `tag(log, interval(a, b))` (log-uniform), `choice(x, y, ...)`,
`range(start, stop, step)`. On the command line, as with the Optuna sweeper, an interval names a
range to search (a grid axis cannot be one): `optimizer.lr='tag(log, interval(1e-5, 1))'`
searches that range in every space that tunes something, `tune.space.adam.optimizer.lr=...` in
one (`with_command_line_spaces`).
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep

from harness.errors import ConfigError
from harness.identity import executes, override_key

METHODS = ("random", "grid", "shortlist")
# A tuning study's protocol in its sweep folder (written by the tuning sweeper, read by the report).
PROTOCOL_FILE = "tuning.json"
DEFAULT_SPACE = "default"
# The method whose trials are the best of an earlier study's (tune.source), not new draws.
SHORTLIST = "shortlist"
# Draws of a random search that repeat an earlier trial of the same combination are drawn again
# (a repeated trial would be the same run twice), at most this many times per trial.
REDRAWS = 100


@dataclass(frozen=True)
class Dimension:
    """One tuned key: a log or linear interval, or a list of values."""

    key: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    integer: bool = False
    values: tuple[Any, ...] | None = None

    def draw(self, rng: np.random.Generator) -> Any:
        if self.values is not None:
            return self.values[int(rng.integers(len(self.values)))]
        if self.log:
            value = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        else:
            value = rng.uniform(self.low, self.high)
        return round(value) if self.integer else value

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


def _dimension(key: str, spec: Any, where: str) -> Dimension:
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


def search_space(tune: Mapping[str, Any], optimizer: str) -> list[Dimension]:
    """The dimensions `tune.space` declares for the optimizer choice `optimizer` (its own entry,
    else `default`), in key order."""
    spaces = tune.get("space") or {}
    name = optimizer if optimizer in spaces else DEFAULT_SPACE
    if name not in spaces:
        raise ConfigError(
            f"tune.space has no entry for optimizer {optimizer} and no {DEFAULT_SPACE} entry"
        )
    entry = spaces[name] or {}
    return [_dimension(k, entry[k], f"tune.space.{name}") for k in sorted(entry)]


def check_protocol(tune: Mapping[str, Any] | None) -> None:
    """One line for a protocol that cannot run: a missing node, an unknown method, a budget
    below 1, a range that cannot be searched, a shortlist without its earlier study."""
    if tune is None:
        raise ConfigError("hydra/sweeper=tune needs a `tune` node: add tune=random (conf/tune/)")
    if tune.get("method") not in METHODS:
        raise ConfigError(
            f"tune.method must be one of {', '.join(METHODS)}, got {tune.get('method')!r}"
        )
    budget = tune.get("budget")
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
        raise ConfigError(
            f"tune.budget (trials per combination) must be an integer >= 1, got {budget!r}"
        )
    if tune["method"] == SHORTLIST and not tune.get("source"):
        raise ConfigError("tune.method=shortlist needs tune.source, the earlier tuning study")
    if not isinstance(tune.get("seed"), int):
        raise ConfigError(f"tune.seed must be an integer, got {tune.get('seed')!r}")
    for name in tune.get("space") or {}:
        search_space(tune, name)


def with_command_line_spaces(
    tune: Mapping[str, Any], overrides: Sequence[Override]
) -> tuple[dict[str, Any], list[Override]]:
    """The protocol `tune` with the search ranges the command line gives, and the overrides
    that are not ranges (the grid axes and fixed values). An interval on `tune.space.<name>.<key>`
    sets that entry; on any other key it becomes that key's range in every space that tunes
    something (a space declared empty, such as YellowFin's, stays empty)."""
    tune = {**tune, "space": {k: dict(v or {}) for k, v in (tune.get("space") or {}).items()}}
    rest = []
    for override in overrides:
        if not override.is_interval_sweep():
            rest.append(override)
            continue
        key, text = override.key_or_group, override.get_value_string()
        parts = key.split(".")
        if parts[:2] == ["tune", "space"] and len(parts) > 3:
            tune["space"].setdefault(parts[2], {})[".".join(parts[3:])] = text
            continue
        tuning = [entry for entry in tune["space"].values() if entry]
        if not tuning:
            raise ConfigError(f"{key}={text}: no search space in tune.space tunes anything")
        for entry in tuning:
            entry[key] = text
    return tune, rest


def _text(value: Any) -> str:
    """A drawn value as an override: 4 significant digits for floats (readable folder names;
    the run's config holds exactly this value)."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _rng(seed: int, combination: Sequence[str]) -> np.random.Generator:
    """The random stream of one combination: the same trials whatever else the sweep holds."""
    digest = hashlib.sha256("\n".join(combination).encode()).digest()
    return np.random.default_rng([seed, int.from_bytes(digest[:8], "big")])


def trials(
    dimensions: Sequence[Dimension],
    method: str,
    budget: int,
    seed: int,
    combination: Sequence[str],
) -> list[list[str]]:
    """The trials of one combination: lists of overrides (`optimizer.lr=0.003162`). An empty
    space has one trial (the config as it is); a grid spreads `budget` points over its
    intervals (per interval: budget ** (1 / intervals) points, log-spaced on a log scale),
    crossed with every value of its choices."""
    if not dimensions:
        return [[]]
    if method == "grid":
        intervals = sum(d.values is None for d in dimensions)
        points = max(1, math.floor(budget ** (1 / intervals) + 1e-9)) if intervals else 1
        axes = [[f"{d.key}={_text(v)}" for v in d.grid(points)] for d in dimensions]
        return [list(t) for t in itertools.product(*axes)]
    rng, found, seen = _rng(seed, combination), [], set()
    for _ in range(budget):
        for _ in range(REDRAWS):
            trial = [f"{d.key}={_text(d.draw(rng))}" for d in dimensions]
            if tuple(trial) not in seen:
                break
        if tuple(trial) in seen:  # a small discrete space: fewer distinct trials than budget
            break
        seen.add(tuple(trial))
        found.append(trial)
    return found


Shortlister = Callable[[list[str], list[str]], list[dict[str, Any]]]


def tuning_jobs(
    combinations: Sequence[Sequence[str]],
    tune: Mapping[str, Any],
    default_optimizer: str,
    shortlisted: Shortlister | None = None,
) -> list[list[str]]:
    """Every job of a tuning study: for each combination of the grid axes (seed aside), its
    trials, each with every seed of the seed axis. `combinations` are the basic sweeper's
    expansion of the axes; `default_optimizer` is the config's optimizer choice when an axis
    does not name one. With method `shortlist`, a combination's trials are the tune.budget
    best of the earlier study in tune.source (`shortlisted(overrides, keys)`: their values,
    best first); without `shortlisted`, every combination counts tune.budget trials (at most
    that many train)."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for combination in combinations:
        rest = tuple(o for o in combination if override_key(o) != "seed")
        seeds = [o for o in combination if override_key(o) == "seed"]
        groups.setdefault(rest, []).extend(s for s in seeds if s not in groups.get(rest, []))
    jobs = []
    for rest, seeds in groups.items():
        optimizer = next(
            (o.split("=", 1)[1] for o in rest if override_key(o) == "optimizer"), default_optimizer
        )
        space = search_space(tune, optimizer)
        tuned = {d.key for d in space}
        fixed = [o for o in rest if override_key(o) not in tuned]  # the space overrides an axis
        # Where or how fast a run executes (threads, device, ...) does not change its draws.
        stream = [o for o in fixed if not executes(override_key(o))]
        if tune["method"] != SHORTLIST:
            found = trials(space, tune["method"], tune["budget"], tune["seed"], stream)
        elif shortlisted is None or not space:
            found = [[] for _ in range(tune["budget"] if space else 1)]
        else:
            keys = [d.key for d in space]
            best = shortlisted(fixed, keys)
            found = [[f"{k}={_text(values[k])}" for k in keys] for values in best]
        for trial in found:
            jobs += [[*fixed, *trial, *([s] if s else [])] for s in (seeds or [None])]
    return jobs


def tuned_keys(tune: Mapping[str, Any]) -> list[str]:
    """Every key some optimizer's search space tunes."""
    return sorted({k for entry in (tune.get("space") or {}).values() for k in (entry or {})})
