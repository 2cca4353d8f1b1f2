"""K models of any one architecture held as one stacked model, trained through torch.func.

The hand-written `StackedMLP` (harness.stacking.mlp) covers the MLPs; any other dense
``nn.Module`` (a convolutional net, ...) stacks here: its K copies' parameters are stacked into
tensors ``[K, ...]``, the forward pass of all K is one ``torch.vmap`` of
``torch.func.functional_call`` over them, and one backward pass of the K losses' sum writes every
model's gradient (the models share no parameter, so each gradient is its own loss's). Each model
keeps its own ``nn.Module``: its parameters' ``.data`` and ``.grad`` are views into the stacked
tensors, so `StackedOptimizers` updates them as it updates an MLP stack.

A model stacks only if a probe on two of its copies works and agrees with them alone
(`stacking_refusal`): buffers (batch-norm statistics) and forward passes that torch.func cannot
batch are refused, and such runs train with the single-run engine.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from harness.problems import Problem


class StackedModule:
    """K models of one architecture as stacked parameter tensors, bound to the models' own
    parameters (`tensors`, `views`: the interface `StackedOptimizers` steps); `forward` and
    `backward` as `StackedMLP`'s (outputs in the layout `class_dim` says), so that the
    problem's `stacked_loss` serves both."""

    class_dim = 2  # outputs are [K, batch, classes]

    def __init__(self, models: Sequence[nn.Module]) -> None:
        self.models: list[nn.Module] = []
        self.names: list[str] = []
        self.params: list[torch.Tensor] = []
        self.grads: list[torch.Tensor] = []
        self._saved: tuple[list[torch.Tensor], torch.Tensor] | None = None
        self.restack(models)

    def __len__(self) -> int:
        return len(self.models)

    @torch.no_grad()
    def restack(self, models: Sequence[nn.Module]) -> None:
        """(Re)build the stacked tensors from `models`' current weights and bind each model's
        parameters and gradients to views of them."""
        self.models = list(models)
        self.names = [name for name, _ in self.models[0].named_parameters()]
        self.params = [torch.stack([m.get_parameter(n) for m in self.models]) for n in self.names]
        self.grads = [torch.zeros_like(p) for p in self.params]
        self._saved = None
        for k, model in enumerate(self.models):
            for name, stacked, grad in zip(self.names, self.params, self.grads, strict=True):
                parameter = model.get_parameter(name)
                parameter.data, parameter.grad = stacked[k], grad[k]
        base = self.models[0]  # the structure; functional_call replaces its parameters

        def call(params: Sequence[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
            return torch.func.functional_call(base, dict(zip(self.names, params, strict=True)), x)

        self._forward = torch.vmap(call, in_dims=(0, None))
        self._forward_per_model = torch.vmap(call, in_dims=(0, 0))

    def tensors(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(stacked parameter, its stacked gradient) pairs."""
        return list(zip(self.params, self.grads, strict=True))

    def views(self, k: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """(model k's parameter, its data view, its gradient view) triples."""
        model = self.models[k]
        return [
            (model.get_parameter(name), stacked[k], grad[k])
            for name, stacked, grad in zip(self.names, self.params, self.grads, strict=True)
        ]

    def forward(self, x: torch.Tensor, keep: bool = False, per_model: bool = False) -> torch.Tensor:
        """Outputs of the K models for the shared input `x` (or, `per_model`, an input per model
        stacked along a first dimension), ``[K, batch, classes]`` (the models' own layout,
        `class_dim` 2); `keep` records the graph `backward` needs."""
        forward = self._forward_per_model if per_model else self._forward
        if not keep:
            with torch.no_grad():
                return forward(self.params, x)
        with torch.enable_grad():
            params = [p.detach().requires_grad_() for p in self.params]
            outputs = forward(params, x)
        self._saved = (params, outputs)
        return outputs.detach()

    def backward(self, grad: torch.Tensor) -> None:
        """Write the gradients of the K models' losses into the stacked gradient tensors, given
        `grad`, the gradient w.r.t. the outputs of the last `forward(..., keep=True)`: one
        backward pass through the vmapped forward (the models share no parameter)."""
        assert self._saved is not None, "backward() needs a forward(keep=True) first"
        params, outputs = self._saved
        grads = torch.autograd.grad(outputs, params, grad_outputs=grad)
        with torch.no_grad():
            for stacked, computed in zip(self.grads, grads, strict=True):
                stacked.copy_(computed)
        self._saved = None


def stacking_refusal(
    problem: Problem, models: Sequence[nn.Module], data: Any, rows: torch.Tensor
) -> str | None:
    """Why models of this architecture cannot train as a `StackedModule` (None: they can),
    found on two copies `models` and a few training examples `rows` of `problem`'s `data`: no
    parameters, buffers, a forward pass torch.func cannot batch, or a stacked loss or gradient
    that differs from the models' own. The models are not changed."""
    if not any(True for _ in models[0].parameters()):
        return "it has no parameters to train"
    if any(True for _ in models[0].buffers()):
        return "it has buffers (such as batch-norm statistics), which a stack does not hold"
    # the rows shared by the models, then other rows for each (seeds of one config in a stack)
    per_model = torch.stack([rows + k * len(rows) for k in range(len(models))])
    for batch in (rows, per_model):
        reason = _probe_rows(problem, models, data, batch)
        if reason is not None:
            return reason
    return None


def _probe_rows(
    problem: Problem, models: Sequence[nn.Module], data: Any, rows: torch.Tensor
) -> str | None:
    try:
        alone = []
        for k, model in enumerate(models):
            loss = problem.loss(model, data, rows if rows.dim() == 1 else rows[k])
            alone.append((loss.detach(), torch.autograd.grad(loss, list(model.parameters()))))
        stack = StackedModule([copy.deepcopy(m) for m in models])
        losses = problem.stacked_loss(stack, data, rows)
    except Exception as exc:  # any failure: this model cannot be trusted in a stack
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return f"its forward and backward fail on a stacked probe ({first})"
    tolerance = {"rtol": 1e-4, "atol": 1e-6}
    for k, (loss, grads) in enumerate(alone):
        stacked_grads = [grad for _, _, grad in stack.views(k)]
        if not torch.allclose(losses[k], loss, **tolerance) or not all(
            torch.allclose(a, b, **tolerance) for a, b in zip(grads, stacked_grads, strict=True)
        ):
            return "its stacked loss or gradient differs from the model's own"
    return None
