"""A user's own optimizer class, trained by its import path: `optimizer=myopt.HalfSGD`.

`optimizer=<module>.<Class>` names any torch.optim.Optimizer class that Python can import (a
`myopt.py` in the working directory, a package on sys.path); its config is written from the
class's own signature as the catalogue writes a library's (`config_of_target`:
harness.optimizers.catalogue.config_of_class), so the class at its defaults is what trains, every
hyper-parameter is in the run's identity, and `optimizer.<key>=...` overrides each. The config
source hydra_plugins/harness_catalogue answers for such a name: it composes wherever Hydra
composes (harness-train, its sweeps, `hydra.compose`).

`optimizer._target_=X` on a command line would only replace the class of the optimizer config
chosen otherwise (adam by default), keeping that config's settings, which X may not take
(`betas`): `as_class_choice` reads it as `optimizer=X`, before Hydra composes anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.config.identity import override_key
from harness.config.validate import optimizer_class
from harness.errors import ConfigError
from harness.optimizers.catalogue import config_of_class

GROUP = "optimizer"
TARGET = f"{GROUP}._target_"


def config_of_target(target: str, key: str = GROUP) -> dict[str, Any]:
    """The optimizer config of the class the import path `target` names (the value of `key`, as
    errors name it): `_target_`, `_partial_`, the parameter split it needs, then every
    constructor argument with its default (`???` where it has none: the run asks for it). A
    ConfigError in one line where `target` imports nothing, or is not an Optimizer class."""
    cls = optimizer_class(target, key)
    if not isinstance(cls, type):
        raise ConfigError(f"{key}={target} is not a torch.optim.Optimizer class")
    return config_of_class(cls, target)


def _targets(override: str) -> list[str]:
    """The import paths an `optimizer._target_=` override names: one, or a sweep's choices."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ChoiceSweep

    parsed = OverridesParser.create().parse_override(override)
    if parsed.is_sweep_override():
        if not isinstance(parsed.value(), ChoiceSweep):
            raise ConfigError(f"{override}: sweep optimizer classes as a list of names (a,b)")
        return list(parsed.sweep_string_iterator())
    return [str(parsed.value())]


def as_class_choice(overrides: Sequence[str]) -> list[str]:
    """Command-line `overrides` with `optimizer._target_=X` read as `optimizer=X`: the class
    built from its own signature (`config_of_target`), the other overrides of its keys
    (`optimizer.lr=0.1`) over its defaults; an `optimizer=<name>` beside it is dropped (the
    class replaces that config). Each class is checked here, its errors spelled as the user
    wrote it. What a command that passes harness-train's overrides to Hydra calls first."""
    overrides = list(overrides)
    given = [i for i, o in enumerate(overrides) if _is_target(o)]
    if not given:
        return overrides
    last = overrides[given[-1]]  # Hydra would apply the last one
    for target in _targets(last):
        config_of_target(target, TARGET)
    choice = f"{GROUP}={last.split('=', 1)[1]}"
    return [
        choice if i == given[-1] else o
        for i, o in enumerate(overrides)
        if i == given[-1] or not (i in given or _is_choice(o))
    ]


def _is_target(override: str) -> bool:
    return "=" in override and not override.startswith("~") and override_key(override) == TARGET


def _is_choice(override: str) -> bool:
    return "=" in override and override_key(override) == GROUP
