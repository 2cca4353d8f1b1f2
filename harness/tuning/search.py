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

Where each optimizer's rate lives (`tune.centre`, `tune.beyond_edge`): with
`centre: {optimizer.lr: 2}` a combination searches the rate over its own range, two decades
each way of the rate its config holds (its library's default for a catalogue name, the file's
for a curated one; the space as written where it holds none), with the same budget. Its trials
stay uniform random draws over that range, and are the plain search's draws wherever that range
and the space as written overlap (`centred_trials`: a study run again under the new protocol
trains only the trials that are new). With `beyond_edge: {decades: 2, rounds: 2}`, a pick at the
edge of its range (the best trial by the validation rule is the smallest or largest rate
tried) is searched again beyond that edge, `decades` more at the same density of trials, up to
`rounds` times (the tuning sweeper plans each round from the last one's results); not where
every trial ends alike, since the rate then moves nothing (`selection.edges`).

Every hyper-parameter, not the rate alone (`tune.every_hyperparameter: true`): each
combination's space is the rate's (the `default` entry) and, by one rule keyed by the argument's
name, its optimizer's momentum or beta1, beta2, eps and weight decay (harness.tuning.spaces:
1 - beta log-uniform, eps over decades, weight decay 0 one draw in four), read from the
optimizer's config; its own entry adds to or changes that space. A shortlist then carries
every key of each trial, exactly (`exact_text`).

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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from hydra.core.override_parser.types import Override

from harness.config.identity import executes, override_key
from harness.errors import ConfigError
from harness.tuning.dimensions import DEFAULT_SPACE, Dimension, dimension_of, exact_text, text_of

METHODS = ("random", "grid", "shortlist")
# A tuning study's protocol in its sweep folder (written by the tuning sweeper, read by the report).
PROTOCOL_FILE = "tuning.json"
# The method whose trials are the best of an earlier study's (tune.source), not new draws.
SHORTLIST = "shortlist"
# Draws of a random search that repeat an earlier trial of the same combination are drawn again
# (a repeated trial would be the same run twice), at most this many times per trial.
REDRAWS = 100


def search_space(
    tune: Mapping[str, Any], optimizer: str, config: Mapping[str, Any] | None = None
) -> list[Dimension]:
    """The dimensions `tune.space` declares for the optimizer choice `optimizer` (its own entry,
    else `default`), in key order. With `tune.every_hyperparameter`, the rule's space over its
    config's hyper-parameters (`config`: its optimizer node; harness.tuning.spaces)."""
    if tune.get("every_hyperparameter"):
        from harness.tuning.spaces import own_space

        return own_space(tune, optimizer, config)
    spaces = tune.get("space") or {}
    name = optimizer if optimizer in spaces else DEFAULT_SPACE
    if name not in spaces:
        raise ConfigError(
            f"tune.space has no entry for optimizer {optimizer} and no {DEFAULT_SPACE} entry"
        )
    entry = spaces[name] or {}
    return [dimension_of(k, entry[k], f"tune.space.{name}") for k in sorted(entry)]


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
    rule = tune.get("every_hyperparameter")
    if rule is not None and not isinstance(rule, bool):
        raise ConfigError(f"tune.every_hyperparameter must be true or false, got {rule!r}")
    if rule and tune["method"] == "grid":
        raise ConfigError(
            "tune.every_hyperparameter needs tune.method=random (or shortlist): a grid over "
            "five keys would hold few points of each"
        )
    for name in tune.get("space") or {}:
        search_space(tune, name)
    _check_edges(tune)


def _check_edges(tune: Mapping[str, Any]) -> None:
    """One line for a `tune.centre` or `tune.beyond_edge` that cannot run."""
    entry, edge = tune.get("centre"), tune.get("beyond_edge")
    if entry:
        decades = next(iter(entry.values())) if isinstance(entry, Mapping) else None
        if len(entry) != 1 or not _positive(decades):
            raise ConfigError(
                f"tune.centre must name one key and its decades each way, e.g. "
                f"{{optimizer.lr: 2}}; got {entry!r}"
            )
        if tune["method"] != "random":
            raise ConfigError("tune.centre needs tune.method=random (its draws are random)")
    if edge:
        if not entry:
            raise ConfigError("tune.beyond_edge needs tune.centre: the key whose edge it searches")
        given = edge if isinstance(edge, Mapping) else {}
        rounds = given.get("rounds")
        if not _positive(given.get("decades")) or not isinstance(rounds, int) or rounds < 1:
            raise ConfigError(
                "tune.beyond_edge needs decades > 0 and rounds >= 1, e.g. {decades: 2, rounds: 2}"
                f"; got {edge!r}"
            )


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


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


def _stored(value: Any) -> Any:
    """A value as a run's stored config holds it, back as the config had it: a list is stored
    as its text ('[0.9, 0.999]', harness.config.identity), its elements numbers or None."""
    if not (isinstance(value, str) and value.startswith("[") and value.endswith("]")):
        return value
    items = [item.strip() for item in value[1:-1].split(",") if item.strip()]
    return [None if item == "None" else _number_or_text(item) for item in items]


def _number_or_text(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


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
        axes = [[f"{d.key}={text_of(v)}" for v in d.grid(points)] for d in dimensions]
        return [list(t) for t in itertools.product(*axes)]
    draws, found, seen = _draws(dimensions, seed, combination), [], set()
    for _ in range(budget):
        for _ in range(REDRAWS):
            trial = _overrides(next(draws), dimensions)
            if tuple(trial) not in seen:
                break
        if tuple(trial) in seen:  # a small discrete space: fewer distinct trials than budget
            break
        seen.add(tuple(trial))
        found.append(trial)
    return found


def _draws(
    dimensions: Sequence[Dimension], seed: int, combination: Sequence[str]
) -> Iterator[dict[str, Any]]:
    """The random search's endless sequence of draws for one combination, in order: its
    first `budget` are the combination's trials (`trials`)."""
    rng = _rng(seed, combination)
    while True:
        yield {d.key: d.draw(rng) for d in dimensions}


def _overrides(trial: Mapping[str, Any], dimensions: Sequence[Dimension]) -> list[str]:
    texts = {d.key: d.text for d in dimensions}
    return [f"{k}={texts[k](v)}" for k, v in trial.items()]


Range = tuple[float, float]


def _width(pieces: Sequence[Range]) -> float:
    return sum(math.log(high / low) for low, high in pieces)


def _inside(pieces: Sequence[Range], low: float, high: float) -> list[Range]:
    found = [(max(a, low), min(b, high)) for a, b in pieces]
    return [(a, b) for a, b in found if a < b]


def _outside(pieces: Sequence[Range], low: float, high: float) -> list[Range]:
    found = [(a, min(b, low)) for a, b in pieces] + [(max(a, high), b) for a, b in pieces]
    return [(a, b) for a, b in found if a < b]


def _log_uniform(rng: np.random.Generator, pieces: Sequence[Range]) -> float:
    """A draw log-uniform over a union of intervals (each piece by its width)."""
    u = rng.uniform(0.0, _width(pieces))
    for low, high in pieces:
        if u <= math.log(high / low):
            return low * math.exp(u)
        u -= math.log(high / low)
    return pieces[-1][1]


def centred_range(dimension: Dimension, value: float | None, decades: float) -> Range:
    """A key's own range: `decades` each way of the value its config holds (geometrically);
    the space as written where it holds none."""
    if value is None or not isinstance(value, int | float) or value <= 0:
        return (dimension.low, dimension.high)
    return (value / 10**decades, value * 10**decades)


def centred_trials(
    dimensions: Sequence[Dimension],
    key: str,
    region: Range,
    count: int,
    seed: int,
    combination: Sequence[str],
) -> list[list[str]]:
    """`count` trials whose `key` is log-uniform over `region` (its other dimensions drawn from
    their spaces), reusing the plain search's draws (`trials`) where `region` overlaps the
    space as written: each trial falls inside that overlap with the probability of its share
    of `region`'s width, and is then the next of the plain search's draws that lies there (the
    first of them are the plain search's own trials); otherwise a fresh draw over the rest of
    `region`. The trials are independent and uniform over `region` either way."""
    base = next(d for d in dimensions if d.key == key)
    if not base.log:
        raise ConfigError(f"tune.centre: {key} needs a log-scale interval, tag(log, interval(..))")
    inside = _inside([region], base.low, base.high)
    outside = _outside([region], base.low, base.high)
    share = _width(inside) / _width([region])
    tag = f"{region[0]:.6g}:{region[1]:.6g}"
    coin = _rng(seed, [*combination, f"coin {tag}"])
    fresh = _rng(seed, [*combination, f"outside {tag}"])
    plain = _draws(dimensions, seed, combination)
    found = []
    for _ in range(count):
        if outside and coin.uniform() >= share:
            trial = {
                d.key: _log_uniform(fresh, outside) if d.key == key else d.draw(fresh)
                for d in dimensions
            }
        else:
            trial = next(t for t in plain if any(a <= t[key] <= b for a, b in inside))
        found.append(_overrides(trial, dimensions))
    return found


Shortlister = Callable[[list[str], list[str]], list[dict[str, Any]]]
# The value of a key in the config of a combination (its overrides as given): where a centred
# range is centred.
ValueOf = Callable[[list[str], str], Any]


@dataclass
class Combination:
    """One combination of a tuning study's grid axes (the seed aside): its overrides, its seeds,
    the space it draws from and, where its rate is centred (`tune.centre`), the range searched
    so far (widened by each round beyond an edge) and the first round's."""

    fixed: list[str]
    seeds: list[str]
    stream: list[str]  # what its random draws are keyed by: where a run executes is not
    given: list[str]  # its overrides as given (a value its space overrides included)
    space: list[Dimension]
    region: Range | None = None
    first: Range | None = None

    def jobs(self, found: Sequence[Sequence[str]]) -> list[list[str]]:
        """Each trial of `found` with every seed."""
        return [[*self.fixed, *t, *([s] if s else [])] for t in found for s in self.seeds or [None]]


def centre(tune: Mapping[str, Any]) -> tuple[str, float] | None:
    """(key, decades) of `tune.centre`, or None."""
    entry = tune.get("centre") or {}
    return next(iter(entry.items())) if entry else None


def combinations_of(
    combinations: Sequence[Sequence[str]],
    tune: Mapping[str, Any],
    default_optimizer: str,
    optimizer_of: Callable[[list[str]], Mapping[str, Any]] | None = None,
) -> list[Combination]:
    """The combinations of a study's grid axes (the basic sweeper's expansion; the seed axis
    gathered), each with its optimizer's search space (`default_optimizer`: the config's
    optimizer choice when no axis names one; `optimizer_of(overrides)`: the optimizer node of
    a combination's config, which the search over every hyper-parameter reads its keys and
    defaults from: without it, the space as written)."""
    seeds_of: dict[tuple[str, ...], list[str]] = {}
    for combination in combinations:
        rest = tuple(o for o in combination if override_key(o) != "seed")
        seeds = seeds_of.setdefault(rest, [])
        seeds += [o for o in combination if override_key(o) == "seed" and o not in seeds]
    found = []
    for rest, seeds in seeds_of.items():
        optimizer = next(
            (o.split("=", 1)[1] for o in rest if override_key(o) == "optimizer"), default_optimizer
        )
        config = (
            optimizer_of(list(rest)) if optimizer_of and tune.get("every_hyperparameter") else None
        )
        space = search_space(tune, optimizer, config)
        tuned = {d.key for d in space}
        fixed = [o for o in rest if override_key(o) not in tuned]  # the space overrides an axis
        stream = [o for o in fixed if not executes(override_key(o))]
        found.append(Combination(fixed, seeds, stream, list(rest), space))
    return found


def first_trials(
    combination: Combination,
    tune: Mapping[str, Any],
    shortlisted: Shortlister | None = None,
    value_of: ValueOf | None = None,
) -> list[list[str]]:
    """A combination's trials before any round beyond an edge: its draws from its space (over
    its own range where `tune.centre` centres one and `value_of` gives the config's value), or
    with method `shortlist` the tune.budget best of the earlier study in tune.source
    (`shortlisted(overrides, keys)`: their values, best first); without `shortlisted`, it
    counts tune.budget trials (at most that many train)."""
    space, budget = combination.space, tune["budget"]
    if tune["method"] == SHORTLIST:
        if shortlisted is None or not space:
            return [[] for _ in range(budget if space else 1)]
        keys = [d.key for d in space]
        # each trial's values exactly as its run had them (a decay's digits beyond four count)
        return [
            [f"{k}={exact_text(_stored(values[k]))}" for k in keys]
            for values in shortlisted(combination.fixed, keys)
        ]
    centred = centre(tune)
    dimension = next((d for d in space if centred and d.key == centred[0]), None)
    if dimension is None or value_of is None:
        return trials(space, tune["method"], budget, tune["seed"], combination.stream)
    key, decades = centred
    region = centred_range(dimension, value_of(combination.given, key), decades)
    combination.region = combination.first = region
    return centred_trials(space, key, region, budget, tune["seed"], combination.stream)


def beyond_edge(combination: Combination, side: str, tune: Mapping[str, Any]) -> list[list[str]]:
    """The trials of one more round beyond the `side` ("low" or "high") edge of a combination's
    centred range: `tune.beyond_edge.decades` more, at its first round's density of trials.
    Widens the combination's range."""
    key, _ = centre(tune)
    low, high = combination.region
    width = 10 ** tune["beyond_edge"]["decades"]
    region = (low / width, low) if side == "low" else (high, high * width)
    combination.region = (region[0], high) if side == "low" else (low, region[1])
    count = round(tune["budget"] * _width([region]) / _width([combination.first]))
    return centred_trials(
        combination.space, key, region, max(1, count), tune["seed"], combination.stream
    )


def tuning_jobs(
    combinations: Sequence[Sequence[str]],
    tune: Mapping[str, Any],
    default_optimizer: str,
    shortlisted: Shortlister | None = None,
    value_of: ValueOf | None = None,
) -> list[list[str]]:
    """Every job of a tuning study's first round: for each combination of the grid axes (seed
    aside), its trials (`first_trials`), each with every seed of the seed axis."""
    return [
        job
        for combination in combinations_of(combinations, tune, default_optimizer)
        for job in combination.jobs(first_trials(combination, tune, shortlisted, value_of))
    ]


def tuned_keys(tune: Mapping[str, Any]) -> list[str]:
    """Every key some optimizer's search space tunes (with tune.every_hyperparameter, every
    key its rule may tune)."""
    keys = {k for entry in (tune.get("space") or {}).values() for k in (entry or {})}
    if tune.get("every_hyperparameter"):
        from harness.tuning.spaces import rule_keys

        keys |= set(rule_keys())
    return sorted(keys)
