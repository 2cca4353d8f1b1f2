"""Checks of a composed run config, each failing with one line that names the key and the fix.

Hydra composes configs without a schema (optimizer and schedule files are free-form keyword
arguments for their classes), so the values every run relies on are checked here, before
anything is computed or written.
"""

from __future__ import annotations

import importlib
import inspect
import numbers
import os
import sys
from typing import TYPE_CHECKING

import torch
from omegaconf import DictConfig, OmegaConf

from harness.config.class_paths import target_object
from harness.errors import ConfigError

if TYPE_CHECKING:
    from harness.problems import Problem

# Keys of an optimizer config that are the harness's, not the constructor's
# (harness.training.building splits them off).
HARNESS_KEYS = ("param_split",)
DTYPES = {"float32": torch.float32, "float64": torch.float64}
ENGINES = ("single", "stacked", "auto")
GRAPH_SETTINGS = ("auto", "off")  # train.cuda_graph (harness.stacking.cuda_graph)
CONSTANT_SCHEDULE = "torch.optim.lr_scheduler.ConstantLR"
OPTIMIZERS_HINT = "(harness-optimizers lists the optimizers by name)"


# A sweep's launcher trains runs; an ESGD study is one command (its population is the sweep).
ONE_STUDY_PER_COMMAND = (
    "experiment=esgd is one study per command: harness-train experiment=esgd [model=net3 ...], "
    "without -m"
)


def is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def require_int(
    value: object, key: str, minimum: int | None = None, optional: bool = False
) -> None:
    if value is None and optional:
        return
    if not is_int(value):
        raise ConfigError(f"{key} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{key} must be >= {minimum}, got {value}")


def require_number(value: object, key: str) -> float:
    if not _is_number(value):
        raise ConfigError(f"{key} must be a number, got {value!r}")
    return float(value)


def _reads_as_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return text.strip().lower() not in ("nan", "inf", "-inf", "+inf", "infinity")


def require_choice(value: object, key: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{key} must be one of {', '.join(choices)}; got {value!r}")


def importable(target: object, key: str) -> object:
    """The object the dotted path `target` (the value of `key`) names, or a ConfigError that
    says in one line why not (Hydra's own message spans several lines). A module that is not
    on sys.path is looked for in the working directory too, after every other place (a console
    script, unlike `python -m`, does not search it): a user's own `myopt.py` there is found,
    and the working directory stays on sys.path, so that what builds it later finds it too."""
    try:
        return _imported(target, key)
    except ConfigError:
        here = os.getcwd()
        if here in sys.path or "" in sys.path:
            raise
        sys.path.append(here)
        try:
            return _imported(target, key)
        except ConfigError:
            sys.path.remove(here)
            raise


def _imported(target: object, key: str) -> object:
    parts = str(target).split(".")
    for split in range(len(parts) - 1, 0, -1):  # the longest importable module prefix
        module = ".".join(parts[:split])
        try:
            found = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is not None and not module.startswith(exc.name):
                raise ConfigError(f"{key}={target} cannot be imported: {exc}") from None
            continue  # the prefix itself is missing: try a shorter one
        try:
            for attribute in parts[split:]:
                found = getattr(found, attribute)
        except AttributeError:
            break
        return found
    raise ConfigError(f"{key}={target} names nothing that can be imported")


def optimizer_class(target: object, key: str) -> object:
    """What `target` (the value of `key`: `optimizer._target_`, or `optimizer` naming a class by
    its import path) names: a torch.optim.Optimizer class, or a function that makes one (a
    ConfigError in one line otherwise)."""
    try:
        found = importable(target, key)
    except ConfigError as exc:
        raise ConfigError(f"{exc} {OPTIMIZERS_HINT}") from None
    if not callable(found):
        raise ConfigError(f"{key}={target} is not a class {OPTIMIZERS_HINT}")
    if inspect.isclass(found) and not issubclass(found, torch.optim.Optimizer):
        raise ConfigError(f"{key}={target} is not a torch.optim.Optimizer class")
    return found


def _not_taken(cls: object, opt: DictConfig) -> list[str]:
    """The keys of optimizer config `opt` that the constructor of `cls` takes no argument for
    (none where it takes **kwargs, or has no signature to read)."""
    try:
        parameters = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return []
    if any(p.kind == p.VAR_KEYWORD for p in parameters.values()):
        return []
    return [k for k in opt if not k.startswith("_") and k not in (*HARNESS_KEYS, *parameters)]


def validate_optimizer(opt: DictConfig) -> None:
    target = optimizer_class(opt.get("_target_"), "optimizer._target_")
    # Left by another optimizer's config (a Hydra composition that set only `_target_`;
    # harness-train reads optimizer._target_=X as optimizer=X: harness.optimizers.own).
    not_taken = _not_taken(target, opt)
    if not_taken:
        raise ConfigError(
            f"{opt.get('_target_')} takes no argument {', '.join(not_taken)}: "
            f"optimizer={opt.get('_target_')} builds it from its own defaults"
        )
    for key in opt:
        if OmegaConf.is_missing(opt, key):  # a constructor argument without a default
            raise ConfigError(
                f"optimizer.{key} has no default in {opt.get('_target_')}: set it "
                f"(optimizer.{key}=...)"
            )
        value = opt[key]
        if isinstance(value, str) and _reads_as_number(value):
            raise ConfigError(
                f"optimizer.{key} is the text {value!r}, not a number: write it without quotes "
                f"(optimizer.{key}={value.strip()})"
            )
    if opt.get("lr") is None and sets_own_step_size(opt.get("_target_")):
        pass  # A2Grad, SARA, ALIG: a step size of their own (a schedule then has nothing to scale)
    elif require_number(opt.get("lr"), "optimizer.lr") <= 0:
        raise ConfigError(f"optimizer.lr must be > 0, got {opt.lr}")
    if "momentum" in opt:
        momentum = require_number(opt.momentum, "optimizer.momentum")
        if not 0 <= momentum < 1:
            raise ConfigError(f"optimizer.momentum must be in [0, 1), got {momentum}")
    if "weight_decay" in opt and require_number(opt.weight_decay, "optimizer.weight_decay") < 0:
        raise ConfigError(f"optimizer.weight_decay must be >= 0, got {opt.weight_decay}")


def sets_own_step_size(target: object) -> bool:
    """Whether the optimizer class `target` works out its own step size when given no `lr`:
    its constructor's `lr` defaults to None, or it has no `lr` at all (ALIG, Polyak's step)."""
    try:
        parameters = inspect.signature(target_object(str(target))).parameters
    except Exception:  # an unknown class: instantiating it reports that, with its name
        return False
    lr = parameters.get("lr")
    return lr is None or lr.default is None


def validate_schedule(opt: DictConfig, schedule: DictConfig) -> None:
    """An optimizer that sets its own learning rate (YellowFin) would overwrite a schedule's
    changes at every step: only the constant schedule goes with it."""
    try:
        tuned = getattr(target_object(opt.get("_target_")), "tuned_hyperparameters", ())
    except Exception:  # an unknown class: instantiating it reports that, with its name
        return
    constant = schedule.get("_target_") == CONSTANT_SCHEDULE and schedule.get("factor") == 1.0
    if opt.get("lr") is None and not constant:
        raise ConfigError(
            f"{opt._target_} sets its own step size (optimizer.lr=null): use schedule=constant"
        )
    if "lr" in tuned and not constant:
        raise ConfigError(
            f"{opt._target_} sets its own learning rate at every step; use schedule=constant"
        )


def validate_train(train: DictConfig) -> None:
    require_int(train.batch_size, "train.batch_size", minimum=1)
    if (train.iterations is None) == (train.epochs is None):
        raise ConfigError(
            "set exactly one of train.iterations and train.epochs (the other to null), "
            f"got iterations={train.iterations}, epochs={train.epochs}"
        )
    require_int(train.iterations, "train.iterations", minimum=1, optional=True)
    require_int(train.epochs, "train.epochs", minimum=1, optional=True)
    require_int(train.log_every, "train.log_every", minimum=1)
    require_int(train.eval_every, "train.eval_every", minimum=1)
    if train.eval_every % train.log_every:
        raise ConfigError(
            f"train.eval_every ({train.eval_every}) must be a multiple of train.log_every "
            f"({train.log_every})"
        )
    require_int(train.eval_train_size, "train.eval_train_size", minimum=1, optional=True)
    require_choice(train.dtype, "train.dtype", tuple(DTYPES))
    require_choice(train.engine, "train.engine", ENGINES)
    require_choice(train.get("cuda_graph", "auto"), "train.cuda_graph", GRAPH_SETTINGS)
    if (
        train.divergence_factor is not None
        and require_number(train.divergence_factor, "train.divergence_factor") <= 1
    ):
        raise ConfigError(
            f"train.divergence_factor must be > 1 or null, got {train.divergence_factor}"
        )
    if train.progress not in ("auto", True, False):
        raise ConfigError(f"train.progress must be auto, true or false, got {train.progress!r}")


def validate_run(cfg: DictConfig, problem: Problem) -> None:
    """Check everything a run of `problem` needs that can be checked before the data is
    loaded."""
    require_int(cfg.seed, "seed", minimum=0)
    require_int(cfg.threads, "threads", minimum=1, optional=True)
    if not isinstance(cfg.device, str):
        raise ConfigError(
            f"device must be auto or a torch device such as cpu or cuda, got {cfg.device!r}"
        )
    if cfg.device != "auto":
        try:
            torch.device(cfg.device)
        except RuntimeError as exc:
            raise ConfigError(f"device={cfg.device!r} is not a torch device ({exc})") from None
    validate_train(cfg.train)
    problem.check(cfg)  # the problem's own keys: model, data, ...
    validate_optimizer(cfg.optimizer)
    validate_schedule(cfg.optimizer, cfg.schedule)
