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
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch


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
    parameter = inspect.signature(cls.step).parameters.get("closure")
    return parameter is not None and parameter.default is inspect.Parameter.empty


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
    returns that loss at the parameters before the step."""
    if needs.closure:
        first: list[torch.Tensor] = []

        def closure() -> torch.Tensor:
            optimizer.zero_grad(set_to_none=True)
            loss = batch_loss()
            loss.backward(create_graph=needs.create_graph)
            if not first:
                first.append(loss.detach())
            return loss

        optimizer.step(closure)
        return first[0]
    loss = batch_loss()
    optimizer.zero_grad(set_to_none=True)
    loss.backward(create_graph=needs.create_graph)
    optimizer.step()
    return loss.detach()


@contextlib.contextmanager
def evaluation_mode(optimizer: torch.optim.Optimizer, needs: Needs) -> Iterator[None]:
    """The parameters the optimizer reports for evaluation (its eval mode) for the duration."""
    if needs.modes:
        optimizer.eval()
    try:
        yield
    finally:
        if needs.modes:
            optimizer.train()
