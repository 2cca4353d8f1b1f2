"""Building a run's optimizer with its learning-rate schedule from configs
(`optimizer_and_schedule`, `build_optimizer`): one builder for single runs, stacks and ESGD's
pool."""

from __future__ import annotations

import functools
import inspect
import numbers
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from omegaconf import DictConfig, OmegaConf

from harness.config.class_paths import build, target_object
from harness.errors import ConfigError
from harness.optimizers.catalogue import HARNESS_KEYS, RUN_LENGTH_ARGUMENTS, is_library_default

if TYPE_CHECKING:
    from harness.training.job import Job


class Optimizers:
    """Several optimizers, each over its own parameters, stepped as one: the mixed setup of a
    problem whose parameters need different optimizers (sparse embedding tables, dense layers).
    `param_groups` are the first optimizer's first, so its learning rate is the one recorded."""

    def __init__(self, optimizers: list[torch.optim.Optimizer]) -> None:
        self.optimizers = optimizers
        self.param_groups = [g for o in optimizers for g in o.param_groups]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for optimizer in self.optimizers:
            optimizer.step()


class Schedulers:
    """The schedules of `Optimizers`, stepped as one."""

    def __init__(self, schedulers: list[torch.optim.lr_scheduler.LRScheduler]) -> None:
        self.schedulers = schedulers

    def step(self) -> None:
        for scheduler in self.schedulers:
            scheduler.step()


class NoSchedule:
    """The schedule of an optimizer that works out its own step size (no `lr` to scale)."""

    def step(self) -> None:
        pass

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


def _without_harness_keys(node: DictConfig) -> DictConfig:
    """The constructor's part of an optimizer config (HARNESS_KEYS are the harness's)."""
    if not any(k in node for k in HARNESS_KEYS):
        return node
    return OmegaConf.masked_copy(node, [k for k in node if k not in HARNESS_KEYS])


def split_parameters(node: DictConfig, params) -> Any:
    """`params` as the parameter groups the optimizer of `node` asks for in its `param_split`
    (a harness key, not a constructor argument). `hidden_matrices`: the
    Muon-like optimizers' split, their orthogonalised update for every parameter of two or more
    dimensions but the last (the classifier head), their AdamW update for the rest (the head,
    biases), in groups flagged `use_muon` as pytorch-optimizer's Muon family reads them."""
    rule = node.get("param_split")
    if rule is None:
        return params
    if rule != "hidden_matrices":
        raise ConfigError(f"optimizer.param_split must be hidden_matrices or null, got {rule!r}")
    params = list(params)
    matrices = [i for i, p in enumerate(params) if p.dim() >= 2][:-1]
    muon = [params[i] for i in matrices]
    rest = [p for i, p in enumerate(params) if i not in set(matrices)]
    groups = [{"params": muon, "use_muon": True}, {"params": rest, "use_muon": False}]
    return [g for g in groups if g["params"]]


def optimizer_and_schedule(
    node: DictConfig, schedule: DictConfig, params, iterations: int, **hyperparameters: Any
):
    """The optimizer of config `node` (its values, then `hyperparameters` over them) over
    `params` (split as its `param_split` says), and the LR schedule of config `schedule` for it
    over a run of `iterations` steps: the one place optimizers and schedules are built (runs,
    stacks, ESGD's pool). A run-length argument the config leaves null (Ranger21's
    `num_iterations`) gets `iterations`; an optimizer without a learning rate (validated: the
    constant schedule) no schedule. A value the constructors refuse is a ConfigError (one
    line)."""
    schedule_kwargs = {}
    if schedule.get("T_max", "unset") is None:  # cosine over the run's whole length
        schedule_kwargs["T_max"] = iterations
    try:
        optimizer = optimizer_factory(node, iterations)(params, **hyperparameters)
        if isinstance(optimizer.param_groups[0].get("lr"), numbers.Real):
            scheduler = build(schedule)(optimizer, **schedule_kwargs)
        else:
            scheduler = NoSchedule()
    except (ValueError, TypeError) as exc:  # torch's own checks of hyper-parameter values
        raise ConfigError(f"invalid optimizer or schedule setting: {exc}") from None
    except ImportError as exc:  # a catalogue optimizer whose own dependency is missing
        raise ConfigError(f"optimizer {node.get('_target_')} cannot be built: {exc}") from None
    except RuntimeError as exc:  # a third-party constructor refusing these parameters
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        target = node.get("_target_")
        raise ConfigError(f"optimizer {target} cannot be built here: {first}") from None
    return optimizer, scheduler


def optimizer_factory(node: DictConfig, iterations: int) -> Callable[..., Any]:
    """`params -> optimizer` of config `node` for a run of `iterations` steps, as
    `optimizer_and_schedule` builds it (split parameters, the run's length where the config
    leaves it null, values as the constructor declares them): what the stacking probe builds,
    too."""
    run_length = {k: iterations for k in RUN_LENGTH_ARGUMENTS if k in node and node[k] is None}
    constructor = _as_declared(build(_without_harness_keys(node)))

    def factory(params, **hyperparameters: Any) -> Any:
        return constructor(split_parameters(node, params), **run_length, **hyperparameters)

    return factory


def _as_declared(factory: Any) -> Any:
    """`factory` (a partial of a constructor) with each value a config holds turned into what
    the constructor declares by its default: a list into a tuple where the default is a tuple
    (betas, QHAdam's nus: some third-party constructors check isinstance(value, tuple)); a
    dtype's name into the dtype; a function's dotted name into the function; and the
    LIBRARY_DEFAULT marker left out of the call, so that the constructor's own default applies
    (harness.optimizers.catalogue)."""
    if not isinstance(factory, functools.partial):
        return factory
    try:
        declared = inspect.signature(factory.func).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return factory
    keywords = {}
    for key, value in factory.keywords.items():
        if is_library_default(value):
            continue
        default = getattr(declared.get(key), "default", None)
        keywords[key] = _declared_value(key, value, default)
    return functools.partial(factory.func, *factory.args, **keywords)


def _declared_value(key: str, value: Any, default: Any) -> Any:
    if isinstance(value, list) and isinstance(default, tuple):
        return tuple(value)
    if isinstance(value, str) and isinstance(default, torch.dtype):
        dtype = getattr(torch, value, None)
        if not isinstance(dtype, torch.dtype):
            raise ConfigError(
                f"optimizer.{key} must name a torch dtype (float32, ...), got {value!r}"
            )
        return dtype
    if isinstance(value, str) and callable(default) and default is not inspect.Parameter.empty:
        try:
            return target_object(value)
        except Exception:
            raise ConfigError(
                f"optimizer.{key} must name a function (torch.max, ...), got {value!r}"
            ) from None
    return value


def build_optimizer(job: Job, model: torch.nn.Module, iterations: int):
    """The optimizer and LR schedule of the job's config for `model`: one optimizer per
    parameter group of its problem (usually one: `optimizer` over every parameter), each with
    the schedule."""
    cfg = job.cfg
    pairs = [
        optimizer_and_schedule(node, cfg.schedule, params, iterations)
        for params, node in job.problem.parameter_groups(cfg, model)
    ]
    if len(pairs) == 1:
        return pairs[0]
    return Optimizers([o for o, _ in pairs]), Schedulers([s for _, s in pairs])
