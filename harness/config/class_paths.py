"""Where a config's `_target_` lives, and building what it names.

A class or function of the harness that moved to another module keeps, in every run's identity,
the dotted name it was recorded under (`recorded`), so a run recorded before the move keeps its
`config_hash` and `config_id` and a sweep still finds it finished. A config that names the old
place still builds (`located`): a user's own config file, or a finished run's saved config.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from omegaconf import DictConfig, OmegaConf

from harness.errors import HarnessError

# Modules that moved: {module recorded in run identities: module it lives in now}.
MOVED_MODULES = {
    "harness.models": "harness.problems.classification.networks",
    "harness.data": "harness.problems.classification.mnist",
    "harness.problems.classification": "harness.problems.classification.problem",
    "harness.recsys.models": "harness.problems.ratings.models",
    "harness.recsys.data": "harness.problems.ratings.data",
    "harness.recsys.problem": "harness.problems.ratings.problem",
    "harness.schedules": "harness.training.schedules",
}
# The problem of a config that names none (`harness.problems.problem_of`).
DEFAULT_PROBLEM = "harness.problems.classification.problem.Classification"

_RECORDED_MODULES = {now: recorded for recorded, now in MOVED_MODULES.items()}


def _renamed(target: Any, modules: dict[str, str]) -> Any:
    if not isinstance(target, str) or "." not in target:
        return target
    module, name = target.rsplit(".", 1)
    return f"{modules[module]}.{name}" if module in modules else target


def located(target: Any) -> Any:
    """Where the dotted name `target` lives now (itself unless its module moved)."""
    return _renamed(target, MOVED_MODULES)


def recorded(target: Any) -> Any:
    """The dotted name run identities record for `target` (itself unless its module moved)."""
    return _renamed(target, _RECORDED_MODULES)


def _each_target(config: Any, rename) -> Any:  # noqa: ANN001 - located or recorded
    """A copy of a nested config (dicts and lists) with each `_target_` value renamed."""
    if isinstance(config, dict):
        return {
            k: rename(v) if k == "_target_" else _each_target(v, rename) for k, v in config.items()
        }
    if isinstance(config, list):
        return [_each_target(v, rename) for v in config]
    return config


def recorded_targets(config: dict) -> dict:
    """A nested config with every `_target_` as run identities record it."""
    return _each_target(config, recorded)


def recorded_flat(flat: dict[str, Any]) -> dict[str, Any]:
    """A flat {dotted key: value} config with every `..._target_` as run identities record it."""
    return {
        k: recorded(v) if k == "_target_" or k.endswith("._target_") else v for k, v in flat.items()
    }


@functools.cache
def target_object(target: str) -> Any:
    """The class or function a `_target_` names (a moved one found where it lives now)."""
    from hydra.utils import get_method  # Hydra's instantiate machinery: only where a run builds

    return get_method(located(target))


def build(node: DictConfig | dict, **kwargs: Any) -> Any:
    """instantiate(node, _convert_="all", **kwargs) that finds moved targets and lets the
    user-facing errors of our own builders through unwrapped. A flat node (a target and its
    arguments, as every config here is) is built directly: Hydra's instantiate copies and merges
    the node first, ~5 ms a call, which a sweep of 1,000 runs pays 5,000 times."""
    spec = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
    spec = _each_target(spec, located)
    target, partial = spec.pop("_target_", None), spec.pop("_partial_", False)
    if isinstance(target, str) and not any(_needs_hydra(k, v) for k, v in spec.items()):
        try:
            factory = target_object(target)
            arguments = {**spec, **kwargs}
            return functools.partial(factory, **arguments) if partial else factory(**arguments)
        except HarnessError:
            raise
        except Exception:  # Hydra's instantiate below reports it, its own way
            pass
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:
        return instantiate(
            {"_target_": target, "_partial_": partial, **spec}, _convert_="all", **kwargs
        )
    except InstantiationException as exc:
        if isinstance(exc.__cause__, HarnessError):
            raise exc.__cause__ from None
        raise


def _needs_hydra(key: str, value: Any) -> bool:
    """A special key (_args_, _recursive_, ...) or, anywhere inside, a nested target: those are
    for Hydra's instantiate."""
    return key.startswith("_") or (isinstance(value, dict | list) and "_target_" in repr(value))


def node_key(node: DictConfig, *, as_json: bool = False) -> str:
    """A config node, resolved, as YAML (or sorted JSON), its targets as run identities record
    them: what checks and caches find a node by, the same before and after a class moved."""
    container = recorded_targets(OmegaConf.to_container(node, resolve=True))
    if as_json:
        return json.dumps(container, sort_keys=True)
    return OmegaConf.to_yaml(OmegaConf.create(container))
