"""How an optimizer takes its step: what some optimizers need beyond backward() and step().

* a closure: `step(closure)` evaluates the loss again, once or many times (L-BFGS, the closure
  variants of Schedule-Free);
* second-order backward: `backward(create_graph=True)`, so that the optimizer can take
  Hessian-vector products of the gradient (AdaHessian, SophiaH);
* train and eval modes: `optimizer.eval()` before every evaluation and `optimizer.train()`
  after it (Schedule-Free evaluates at an average of its iterates, not at the training point).

`needs_of` reads them off the optimizer; `take_step` does one step accordingly and returns the
mini-batch loss; `evaluation_mode` brackets an evaluation.
"""

from __future__ import annotations

import contextlib
import inspect
import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

# How a run's update is computed, as its record says: the optimizer's own step() (torch's fused
# implementation where it runs), or in a stack one rule for the models of a slice or one step
# shared by seeds of one config (harness.stacking).
OPTIMIZER_STEP, TORCH_FUSED = "optimizer_step", "torch_fused"
STACKED_RULE, SHARED_STEP = "stacked_rule", "shared_step"

# The model of the optimizer probes (stacking, sharing, restoring): a hidden matrix, a head and
# its bias (Muon's split sees both of its parts).
PROBE_SHAPES = ((3, 8), (2, 3), (2,))


def own_step_path(optimizer: torch.optim.Optimizer) -> str:
    """The update path of an optimizer that calls its own step(): fused if it was built so."""
    return TORCH_FUSED if optimizer.param_groups[0].get("fused") else OPTIMIZER_STEP


@dataclass(frozen=True)
class Needs:
    closure: bool = False
    create_graph: bool = False
    modes: bool = False

    def __bool__(self) -> bool:
        return self.closure or self.create_graph or self.modes

    def describe(self) -> str:
        what = [
            ("a closure", self.closure),
            ("second-order backward", self.create_graph),
            ("train/eval modes", self.modes),
        ]
        return ", ".join(text for text, needed in what if needed)


def _requires_closure(cls: type) -> bool:
    """`step(closure)` without a default, or a default None that the step refuses
    (pytorch-optimizer's ALIG and SAM family raise its NoClosureError)."""
    parameter = inspect.signature(cls.step).parameters.get("closure")
    if parameter is None:
        return False
    if parameter.default is inspect.Parameter.empty:
        return True
    try:
        return "NoClosureError" in inspect.getsource(cls.step)
    except (OSError, TypeError):  # no source to read (a compiled class)
        return False


def _second_order(cls: type) -> bool:
    # pytorch-optimizer's Hessian-based optimizers take a `hessian` in step(), which they
    # estimate otherwise (Hutchinson's method) from the gradient's graph.
    return "hessian" in inspect.signature(cls.step).parameters


def _has_modes(cls: type) -> bool:
    return callable(getattr(cls, "train", None)) and callable(getattr(cls, "eval", None))


def needs_of_class(cls: type) -> Needs:
    """What optimizers of class `cls` need of the training step (see the module's docstring)."""
    return Needs(_requires_closure(cls), _second_order(cls), _has_modes(cls))


def needs_of(optimizer: torch.optim.Optimizer) -> Needs:
    """What `optimizer` needs of the training step; several optimizers stepped as one (one per
    parameter group of a problem) need what any of them needs."""
    members = getattr(optimizer, "optimizers", None)
    if members is None:
        return needs_of_class(type(optimizer))
    needs = [needs_of(member) for member in members]
    fields = ("closure", "create_graph", "modes")
    return Needs(*(any(getattr(n, f) for n in needs) for f in fields))


def take_step(
    optimizer: torch.optim.Optimizer, needs: Needs, batch_loss: Callable[[], torch.Tensor]
) -> torch.Tensor:
    """One optimisation step on the mini-batch whose loss `batch_loss` computes (forward pass);
    returns that loss at the parameters before the step.

    With a closure, the gradient is computed first, as the SAM family expects, and the closure
    re-evaluates loss and gradient (under enable_grad: step() runs under no_grad) wherever the
    optimizer calls it. Its first call at unchanged parameters (L-BFGS's first evaluation,
    ALIG's loss for its step size) returns the loss already computed instead of computing it
    again: parameters changed in place show in their version counters."""
    loss = batch_loss()
    optimizer.zero_grad(set_to_none=True)
    loss.backward(create_graph=needs.create_graph)
    if not needs.closure:
        optimizer.step()
        return loss.detach()
    params = [p for group in optimizer.param_groups for p in group["params"]]
    versions = [p._version for p in params]
    calls = 0

    def closure() -> torch.Tensor:
        nonlocal calls
        calls += 1
        if calls == 1 and [p._version for p in params] == versions:
            return loss
        with torch.enable_grad():
            optimizer.zero_grad(set_to_none=True)
            again = batch_loss()
            again.backward(create_graph=needs.create_graph)
        return again

    optimizer.step(closure)
    return loss.detach()


def failure_reason(exc: BaseException) -> str:
    """An optimizer's exception as one line: its type and the first line of its message."""
    name = type(exc).__name__.lstrip("_")  # torch's _LinAlgError is torch.linalg.LinAlgError
    message = str(exc).strip().splitlines()
    return f"{name}: {message[0]}" if message else name


@contextlib.contextmanager
def evaluation_mode(optimizer: torch.optim.Optimizer, needs: Needs) -> Iterator[None]:
    """The parameters the optimizer reports for evaluation (its eval mode) for the duration."""
    if needs.modes:
        _quietly(optimizer.eval)
    try:
        yield
    finally:
        if needs.modes:
            _quietly(optimizer.train)


def in_train_mode(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """The optimizer, switched to its train mode if it has modes (Schedule-Free trains in it,
    alone, in a stack and in the probes)."""
    if needs_of(optimizer).modes:
        _quietly(optimizer.train)
    return optimizer


def _quietly(switch: Callable[[], Any]) -> None:
    # schedulefree's reference classes print "Switching to train mode" at every switch: two
    # lines per evaluation of each of a sweep's runs in its log
    with contextlib.redirect_stdout(io.StringIO()):
        switch()
