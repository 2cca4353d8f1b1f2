"""Every optimizer a user might pick, by name: torch.optim, schedulefree and pytorch-optimizer.

`optimizer=<name>` composes a config for any optimizer class of these packages without a file
per optimizer: `config_of(name)` writes the class's constructor with every default spelled out
(`_target_`, `_partial_: true`, then each keyword argument), so a run's identity and the tables
see every hyper-parameter, and each is overridable like a curated file's (`optimizer.lr=...`).
The curated files in conf/optimizer/ come first: a name with a file is that file (its hashes
unchanged); the Hydra config source hydra_plugins/harness_catalogue serves the rest.

Names: torch.optim's classes in lower case (`lbfgs`, `rprop`, ...); schedulefree's as
`schedulefree_<class>` (`schedulefree_adamw`); pytorch-optimizer's as the package names them
(`lion`, `adan`, `soap`, ...), with `pto_` in front where torch.optim has the name already
(`pto_adamax` is pytorch-optimizer's AdaMax). A constructor argument without a default is left
`???` (the run says which key to set), but for the run's length (Ranger21's `num_iterations`):
null, which the run fills with its number of steps. A default a config cannot hold is never
written as null (which the constructor would read as a setting of its own): a torch dtype is
its name (`momentum_dtype: bfloat16`, overridable by name), any other value (a function, such
as ADOPT's clipping schedule or AdaShift's `torch.max`) the marker `<library default: ...>`,
which the builder leaves out of the call so that the constructor's own default applies
(harness.training.building.optimizer_factory).

Importing pytorch-optimizer costs about 2 s, so nothing here imports a package until a name
outside the curated files is asked for.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
from collections.abc import Callable
from typing import Any

import torch

from harness.config.validate import HARNESS_KEYS

# Constructor arguments that are not hyper-parameters: what the harness passes or decides.
NOT_HYPERPARAMETERS = {"self", "params", "foreach", "fused", "capturable", "differentiable"}
MISSING = "???"
# Constructor arguments without a default that the run supplies when the config leaves them
# null: its length in optimizer steps (Ranger21 plans its warm-up and warm-down by it).
RUN_LENGTH_ARGUMENTS = ("num_iterations",)
# A default no config can hold, kept out of the constructor's call: "<library default: what>".
LIBRARY_DEFAULT = "<library default: "
PREFIX_SHADOWED = "pto_"
PREFIX_SCHEDULEFREE = "schedulefree_"


def _optimizer_classes(module: Any) -> dict[str, type]:
    return {
        name: value
        for name, value in vars(module).items()
        if inspect.isclass(value)
        and issubclass(value, torch.optim.Optimizer)
        and value is not torch.optim.Optimizer
    }


def _torch_optim() -> dict[str, type]:
    return {name.lower(): cls for name, cls in _optimizer_classes(torch.optim).items()}


def _schedulefree() -> dict[str, type]:
    try:
        module = importlib.import_module("schedulefree")
    except ImportError:
        return {}
    classes = _optimizer_classes(module)
    return {
        PREFIX_SCHEDULEFREE + name.lower().replace("schedulefree", ""): cls
        for name, cls in classes.items()
        if "ScheduleFree" in name and "Wrapper" not in name  # wrappers take an optimizer
    }


def _pytorch_optimizer(taken: set[str]) -> dict[str, type]:
    try:
        module = importlib.import_module("pytorch_optimizer")
    except ImportError:
        return {}
    found = {}
    for name in module.get_supported_optimizers():
        cls = module.load_optimizer(name)
        if cls.__module__.startswith("torch.optim"):
            continue  # torch's own class under pytorch-optimizer's name: listed as torch's
        found[PREFIX_SHADOWED + name if name in taken else name] = cls
    return found


@functools.cache
def catalogue() -> dict[str, type]:
    """Every optimizer class by its name here (imports the packages: ~2 s, once)."""
    classes = _torch_optim()
    classes |= _schedulefree()
    classes |= _pytorch_optimizer(set(classes))
    return dict(sorted(classes.items()))


def _yaml_value(value: Any) -> Any:
    """A default as a config holds it: tuples as lists (floats, inf included, as they are); a
    one-element tensor as its number; a torch dtype by name; anything else (a function) as the
    LIBRARY_DEFAULT marker that names it, never as None (a setting of its own to many
    constructors: ADOPT reads clip_lambda=None as "no clipping")."""
    if isinstance(value, tuple | list):
        return [_yaml_value(v) for v in value]
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    return f"{LIBRARY_DEFAULT}{_described(value)}>"


def is_library_default(value: Any) -> bool:
    """Whether a config value is the LIBRARY_DEFAULT marker (the constructor's own default)."""
    return isinstance(value, str) and value.startswith(LIBRARY_DEFAULT)


def _described(value: Any) -> str:
    """A default no config can hold, as a reader knows it: a lambda by its source
    (`lambda step: math.pow(step, 0.25)`), a function by its dotted name (`torch.max`)."""
    name = getattr(value, "__name__", None)
    if name == "<lambda>":
        try:
            found = re.search(r"\blambda\b.*", inspect.getsource(value))
            if found:
                return found.group().strip().rstrip(",").strip()
        except (OSError, TypeError):
            pass
    if name is not None:
        module = getattr(value, "__module__", None) or type(value).__module__
        return f"{module}.{name}" if module else name
    return type(value).__qualname__


def hyperparameters(cls: Callable) -> dict[str, Any]:
    """The keyword arguments of `cls`'s constructor with their defaults (MISSING where there is
    none; None for RUN_LENGTH_ARGUMENTS, which the run supplies), in the constructor's order;
    *args, **kwargs and NOT_HYPERPARAMETERS left out."""
    found = {}
    for name, parameter in inspect.signature(cls).parameters.items():
        if name in NOT_HYPERPARAMETERS or parameter.kind in (
            parameter.VAR_POSITIONAL,
            parameter.VAR_KEYWORD,
        ):
            continue
        default = parameter.default
        if default is parameter.empty:
            found[name] = None if name in RUN_LENGTH_ARGUMENTS else MISSING
        else:
            found[name] = _yaml_value(default)
    return found


def parameter_split(cls: type) -> str | None:
    """The split of the parameters `cls` needs (harness.training.building.split_parameters), or
    None: pytorch-optimizer's Muon family reads a `use_muon` flag on each parameter group."""
    return "hidden_matrices" if "use_muon" in (cls.__doc__ or "") else None


def config_of(name: str) -> dict[str, Any] | None:
    """The optimizer config of `name` (None: no such optimizer in the catalogue): its target,
    the parameter split it needs (if any: `param_split`), then its hyper-parameters."""
    cls = catalogue().get(name)
    if cls is None:
        return None
    return config_of_class(cls, f"{cls.__module__}.{cls.__qualname__}")


def config_of_class(cls: type, target: str) -> dict[str, Any]:
    """The optimizer config of class `cls` by the dotted name `target`, as `config_of` writes
    a catalogued one's: a user's own class (harness.optimizers.own) is spelled out the same
    way."""
    split = parameter_split(cls)
    config: dict[str, Any] = {"_target_": target, "_partial_": True}
    if split is not None:
        config[HARNESS_KEYS[0]] = split
    return config | hyperparameters(cls)
