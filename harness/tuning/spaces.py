"""Every hyper-parameter an optimizer's authors would tune: the rule of a richer search.

With `tune.every_hyperparameter: true` a tuning study searches, beside the rate (its own range,
`tune.centre`), each of these constructor arguments wherever the optimizer's config holds them,
by one rule keyed by the argument's name:

| argument | kind | drawn | range |
|---|---|---|---|
| `momentum`, `beta1`, `betas[0]` | first moment | 1 - beta, log-uniform | 1e-3..1 (beta 0..0.999) |
| `beta2`, `betas[1]` | second moment | 1 - beta, log-uniform | 1e-4..0.1 (beta 0.9..0.9999) |
| `eps` (of a list: each) | epsilon | log-uniform | default / 10^2 .. default * 10^6 |
| `weight_decay` | weight decay | 0 one draw in four, else log-uniform | 1e-5..0.1 |

Choi et al. (2019) draw 1 - beta log-uniform, since a decay's effect lives in its horizon
1 / (1 - beta): 0.9 and 0.99 are as far apart as 0.99 and 0.999. Epsilon's effect grows with it
(a large one turns Adam into momentum SGD), so its range reaches further above the default
than below. A weight decay is often best off, so 0 is a value of its own, not a limit.

A library's default always lies inside its range: a range that misses it is widened to it. A
decay whose default is 0 or at least 1 (plain SGD's momentum, RMSprop's, PNM's beta2 = 1) and an
epsilon of 0 switch a mechanism off or set what the optimizer is: they stay at the default, as
do a list's further elements (CAME's third beta), and every other argument. Lists are drawn
element by element and passed as lists (the builder makes a tuple where the default is one).

An optimizer's own entry in `tune.space` changes its space: a range in Hydra's sweep grammar
replaces the rule's for that key, a kind's name (`second_moment`) applies the rule to a key the
rule does not know by name (RMSprop's `alpha`, Adadelta's `rho`), `null` holds a key at its
default, and an empty entry (`{}`) tunes nothing (YellowFin). The `default` entry gives the
rate's range to every optimizer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.errors import ConfigError
from harness.tuning.dimensions import DEFAULT_SPACE, Dimension, dimension_of

# The switch in the `tune` node.
SWITCH = "every_hyperparameter"
FIRST_MOMENT, SECOND_MOMENT, EPS, WEIGHT_DECAY = (
    "first_moment",
    "second_moment",
    "eps",
    "weight_decay",
)
KINDS = (FIRST_MOMENT, SECOND_MOMENT, EPS, WEIGHT_DECAY)
# 1 - beta, log-uniform: a first moment from no momentum to a horizon of 1,000 steps, a second
# moment from a horizon of 10 to 10,000 steps.
DECAYS = {FIRST_MOMENT: (1e-3, 1.0), SECOND_MOMENT: (1e-4, 1e-1)}
EPS_DECADES = (2, 6)  # below and above the default
WEIGHT_DECAY_RANGE = (1e-5, 1e-1)
WEIGHT_DECAY_OFF = 0.25  # the share of draws at exactly 0
# The constructor arguments the rule knows by name: a kind per element of a list (the last
# kind for every element where a name has one kind, as `eps`; held beyond them, as betas[2]).
BY_NAME = {
    "momentum": (FIRST_MOMENT,),
    "beta1": (FIRST_MOMENT,),
    "beta2": (SECOND_MOMENT,),
    "betas": (FIRST_MOMENT, SECOND_MOMENT),
    "eps": (EPS,),
    "weight_decay": (WEIGHT_DECAY,),
}
PREFIX = "optimizer."


def enabled(tune: Mapping[str, Any]) -> bool:
    return bool(tune.get(SWITCH))


def rule_keys() -> list[str]:
    """Every key the rule may tune, by name."""
    return [PREFIX + name for name in BY_NAME]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def kind_dimension(key: str, kind: str, default: Any) -> Dimension | None:
    """The rule's range for one value of kind `kind` whose default is `default`, or None where
    the rule holds it (a default outside the kind's domain)."""
    if kind in DECAYS:
        if not _number(default) or not 0 < default < 1:
            return None
        low, high = DECAYS[kind]
        rest = 1.0 - default
        return Dimension(key, min(low, rest), max(high, rest), log=True, complement=True)
    if kind == EPS:
        if not _number(default) or default <= 0:
            return None
        below, above = EPS_DECADES
        return Dimension(key, default / 10**below, default * 10**above, log=True)
    if kind == WEIGHT_DECAY:
        if not _number(default) or default < 0:
            return None
        low, high = WEIGHT_DECAY_RANGE
        if default > 0:
            low, high = min(low, default), max(high, default)
        return Dimension(key, low, high, log=True, zero=WEIGHT_DECAY_OFF)
    raise ConfigError(f"{key}: {kind!r} is not a kind of the rule ({', '.join(KINDS)})")


def rule_dimension(key: str, kinds: tuple[str, ...], default: Any) -> Dimension | None:
    """A key's dimension by the rule: a list element by element, or None where nothing of it
    is tuned."""
    if not isinstance(default, list | tuple):
        return kind_dimension(key, kinds[0], default)
    elements = []
    for i, value in enumerate(default):
        kind = kinds[i] if i < len(kinds) else kinds[0] if len(kinds) == 1 else None
        found = kind and kind_dimension(f"{key}[{i}]", kind, value)
        elements.append(found or value)
    if not any(isinstance(e, Dimension) for e in elements):
        return None
    return Dimension(key, elements=tuple(elements))


def own_space(
    tune: Mapping[str, Any], optimizer: str, config: Mapping[str, Any] | None
) -> list[Dimension]:
    """The search space of the optimizer choice `optimizer` under the rule: the `default`
    entry's keys (the rate), the rule's for every key of `config` (the optimizer's node,
    `{"lr": 0.001, "betas": [0.9, 0.999], ...}`) it knows by name, then the optimizer's own
    entry; in key order. Without `config`, the entries' ranges alone (and the entries
    checked)."""
    spaces = tune.get("space") or {}
    own = spaces.get(optimizer)
    if own is not None and not own:
        return []  # nothing to tune, by the study's word
    dimensions: dict[str, Dimension] = {}
    for name, default in (config or {}).items():
        kinds = BY_NAME.get(name)
        found = kinds and rule_dimension(PREFIX + name, kinds, default)
        if found:
            dimensions[found.key] = found
    entries = [(DEFAULT_SPACE, spaces.get(DEFAULT_SPACE) or {}), (optimizer, own or {})]
    for where, entry in entries:
        for key, spec in entry.items():
            if spec is None:
                dimensions.pop(key, None)  # held at its default
            elif spec in KINDS:
                name = key.removeprefix(PREFIX)
                if config is None:
                    continue
                if name not in config:
                    raise ConfigError(
                        f"tune.space.{where}.{key}: optimizer {optimizer} has no {name}"
                    )
                found = rule_dimension(key, (spec,), config[name])
                if found is None:
                    raise ConfigError(
                        f"tune.space.{where}.{key}: {spec} needs a default it can search "
                        f"around; {optimizer}'s is {config[name]!r}"
                    )
                dimensions[key] = found
            else:
                try:
                    dimensions[key] = dimension_of(key, spec, f"tune.space.{where}")
                except ConfigError as exc:
                    raise ConfigError(f"{exc}; or a kind of the rule: {', '.join(KINDS)}") from None
    return [dimensions[k] for k in sorted(dimensions)]
