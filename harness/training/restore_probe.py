"""Whether an optimizer goes on exactly from a checkpoint: its `state_dict()` must hold all it
carries from step to step. `restore_refusal` checks it on a probe; a task with an optimizer that
fails it trains without checkpoints (harness.training.checkpoint). Each optimizer config is
probed once (harness.training.preflight).
"""

from __future__ import annotations

import io
import math
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from harness.training import preflight
from harness.training.building import optimizer_factory
from harness.training.restoring import load_optimizer_state, rng_state, set_rng_state
from harness.training.stepping import PROBE_SHAPES, in_train_mode, needs_of, take_step

if TYPE_CHECKING:
    from harness.training.job import Job


def probe(jobs: Sequence[Job]) -> None:
    """Probe the optimizer config of each of `jobs` (those not probed yet)."""
    for job in jobs:
        refusal(job)


def refusal(job: Job) -> str | None:
    """`restore_refusal` of the job's optimizer config, probed once (harness.training.preflight)."""
    node, iterations = job.cfg.optimizer, job.run_length
    return preflight.outcome(
        "restores",
        (job.optimizer_key, iterations),
        lambda: restore_refusal(optimizer_factory(node, iterations)),
    )


PROBE_STEPS = 6  # the probe's steps, half before its checkpoint and half after


def restore_refusal(make_optimizer: Callable[..., torch.optim.Optimizer]) -> str | None:
    """Why an optimizer `make_optimizer` builds would not go on exactly from a checkpoint (None:
    it would): on a probe in float64, PROBE_STEPS steps of one instance against half of them,
    its `state_dict()` written, read back and loaded into a new instance over the parameters'
    saved values, and the other half, torch's random state restored as the engine does. Each
    step is taken as the engine takes it (a closure, second-order backward: `take_step`). An
    optimizer that carries anything between steps outside its state_dict (an attribute of its
    own) differs."""
    generator = torch.Generator().manual_seed(4)
    start = [torch.randn(*s, dtype=torch.float64, generator=generator) for s in PROBE_SHAPES]
    targets = [torch.randn(*s, dtype=torch.float64, generator=generator) for s in PROBE_SHAPES]

    def build(values: list[torch.Tensor]) -> tuple[list[torch.nn.Parameter], Any]:
        params = [torch.nn.Parameter(v.clone()) for v in values]
        return params, in_train_mode(make_optimizer(params))

    def steps(params: list[torch.nn.Parameter], optimizer: Any, count: int) -> None:
        def loss() -> torch.Tensor:  # not a quadratic: curvature that moves
            gaps = [p - t for p, t in zip(params, targets, strict=True)]
            return sum((gap**2 * (1 + gap.abs())).sum() for gap in gaps)

        needs = needs_of(optimizer)
        for _ in range(count):
            take_step(optimizer, needs, loss)

    try:  # quietly: warnings of the probe's own steps (AdaHessian's create_graph) say nothing
        with torch.random.fork_rng(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.manual_seed(5)
            params, optimizer = build(start)
            steps(params, optimizer, PROBE_STEPS)
            straight = [p.detach().clone() for p in params]
            straight_attributes = _attributes(optimizer)

            torch.manual_seed(5)
            params, optimizer = build(start)
            steps(params, optimizer, PROBE_STEPS // 2)
            saved, random = _round_trip(optimizer.state_dict()), rng_state()
            values = [p.detach().clone() for p in params]
            torch.manual_seed(6)  # building may draw: the saved random state is what counts
            params, optimizer = build(values)
            load_optimizer_state(optimizer, saved)
            set_rng_state(random)
            steps(params, optimizer, PROBE_STEPS - PROBE_STEPS // 2)
    except Exception as exc:  # any failure on the probe: do not checkpoint it
        return f"it failed on the checkpoint probe ({type(exc).__name__}: {exc})"
    # NaN equal to NaN: a probe that a large rate blows up (DualAdam at 0.05) is no difference
    same = all(_equal(a, b.detach()) for a, b in zip(straight, params, strict=True))
    restored_attributes = _attributes(optimizer)
    compared = [  # a cache computed when first needed (L-BFGS's _numel_cache) is no state
        name
        for name in straight_attributes.keys() | restored_attributes.keys()
        if straight_attributes.get(name) is not None and restored_attributes.get(name) is not None
    ]
    if not same or not all(
        _equal(straight_attributes[name], restored_attributes[name]) for name in compared
    ):
        return "it carries state between steps outside its state_dict()"
    return None


def _attributes(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's own values outside its state_dict (a step counter kept as an attribute,
    which may matter only after the probe's steps, as a step at which it does something),
    private ones too: numbers, strings, tensors and lists of them."""
    outside = {"state", "param_groups", "defaults"}
    return {
        name: value
        for name, value in vars(optimizer).items()
        if name not in outside and _plain(value)
    }


def _plain(value: Any) -> bool:
    if isinstance(value, list | tuple):
        return all(_plain(v) for v in value)
    return isinstance(value, int | float | str | torch.Tensor | None)


def _equal(a: Any, b: Any) -> bool:
    """Equal values, NaN equal to NaN (a NaN kept as an attribute is not a difference)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if (a.shape, a.dtype) != (b.shape, b.dtype):
            return False
        return torch.equal(a, b) or bool(torch.isclose(a, b, 0, 0, equal_nan=True).all())
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def _round_trip(state: dict[str, Any]) -> dict[str, Any]:
    """`state` written and read back as a checkpoint is: copies, nothing shared with the
    instance that gave it."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)
