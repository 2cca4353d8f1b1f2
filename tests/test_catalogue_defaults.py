"""Every optimizer as its library made it: `optimizer=<name>` builds the optimizer its own class
builds with nothing but the parameters (issue 39, item 1).

For every name of the catalogue, on a small float64 MLP with the same initial weights, batches
and random draws: the optimizer the harness builds from the composed config, and the class
called as `cls(params)` (plus what the catalogue adds on purpose: the run's length where the
constructor has no default for it, and the parameter split of the Muon family), hold the same
settings in their parameter groups and take the same twelve steps (closures and second-order
backward as the harness takes them, harness.training.stepping) to 1e-10, or both fail with the same
error. A curated file (conf/optimizer/) sets the course's values, not the library's defaults:
there the class is called with exactly the file's values.
"""

import inspect
import math
import random

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from conftest import CONF_DIR, compose_config
from harness.optimizers.catalogue import (
    HARNESS_KEYS,
    RUN_LENGTH_ARGUMENTS,
    catalogue,
    parameter_split,
)
from harness.training.building import optimizer_factory, split_parameters
from harness.training.stepping import failure_reason, in_train_mode, needs_of, take_step

NAMES = list(catalogue())
CURATED = {p.stem for p in (CONF_DIR / "optimizer").glob("*.yaml")}
STEPS = 12


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8), torch.nn.Tanh(),
        torch.nn.Linear(8, 3),
    )  # fmt: skip
    return model.double()


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [
        (torch.randn(16, 6, generator=generator, dtype=torch.float64),
         torch.randint(0, 3, (16,), generator=generator))
        for _ in range(4)
    ]  # fmt: skip


def _settings(optimizer: torch.optim.Optimizer) -> list[dict]:
    return [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]


def _trained(make) -> tuple[list[dict], torch.Tensor] | str:
    """The optimizer's settings and the parameters after STEPS steps, or its error in one line."""
    model, batches = _model(), _batches()
    try:
        optimizer = in_train_mode(make(list(model.parameters())))
        settings, needs = _settings(optimizer), needs_of(optimizer)
        # the random draws of a step (Hutchinson probes; Kron's numpy draws), alike
        torch.manual_seed(2), np.random.seed(2), random.seed(2)
        for step in range(STEPS):
            x, y = batches[step % len(batches)]
            take_step(
                optimizer, needs, lambda x=x, y=y: torch.nn.functional.cross_entropy(model(x), y)
            )
    except Exception as exc:  # a constructor or step that refuses: both must refuse alike
        return failure_reason(exc)
    return settings, torch.cat([p.detach().flatten() for p in model.parameters()])


def _reference(name: str):
    """`params -> optimizer` as the library makes it: the class with the parameters alone, or a
    curated file's own values."""
    cls = catalogue()[name] if name not in CURATED else None
    if cls is None:
        node = OmegaConf.load(CONF_DIR / "optimizer" / f"{name}.yaml")
        cls = _class(node._target_)
        values = {k: v for k, v in OmegaConf.to_container(node).items() if not k.startswith("_")}
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
        return lambda params: cls(params, **values)
    extra = {k: STEPS for k in RUN_LENGTH_ARGUMENTS if _required(cls, k)}
    split = parameter_split(cls)
    node = OmegaConf.create({HARNESS_KEYS[0]: split})
    return lambda params: cls(split_parameters(node, params), **extra)


def _class(target: str) -> type:
    module, _, name = target.rpartition(".")
    return getattr(__import__(module, fromlist=[name]), name)


def _required(cls: type, key: str) -> bool:
    parameter = inspect.signature(cls).parameters.get(key)
    return parameter is not None and parameter.default is parameter.empty


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return torch.equal(torch.as_tensor(a), torch.as_tensor(b))
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_every_optimizer_steps_as_its_own_class_at_its_own_defaults(name):
    cfg = compose_config([f"optimizer={name}"])
    required = [k for k in cfg.optimizer if OmegaConf.is_missing(cfg.optimizer, k)]
    if required:  # no default to be faithful to: the run asks for it (`???`), in one line
        assert all(_required(catalogue()[name], k) for k in required), (name, required)
        return
    harness = _trained(optimizer_factory(cfg.optimizer, STEPS))
    library = _trained(_reference(name))
    if isinstance(library, str) or isinstance(harness, str):
        assert harness == library, f"{name}: the harness's {harness!r}, the class's {library!r}"
        return
    (ours, theirs), (mine, reference) = (harness[0], library[0]), (harness[1], library[1])
    different = [
        f"{key}: {group[key]!r} against {theirs[i].get(key)!r}"
        for i, group in enumerate(ours)
        for key in group
        if not _same(group[key], theirs[i].get(key))
    ]
    assert not different, f"{name}: settings differ from the class's own: {different}"
    difference = (mine - reference).abs().max().item()
    assert difference <= 1e-10, f"{name}: parameters differ by {difference:.3g} after {STEPS} steps"
