"""K MLPs of one architecture held as one stacked model, forward and backward written out.

The first layer of all K models is one matrix product, ``W1[K*out, in] @ x.T``; later layers are
batched products (``baddbmm``); activations are kept transposed, ``[K, features, batch]``, so that
every product reads and writes contiguous memory. Forward and backward are written out (no
autograd): gradients land directly in stacked gradient tensors, using the same ATen backward
kernels autograd would call. Each model keeps its own ``nn.Module``: its parameters' ``.data``
and ``.grad`` are views into the stacked tensors. The loss and its gradient w.r.t. the logits are
the problem's (`Problem.stacked_loss`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from harness.problems.layers import ACTIVATIONS

_aten = torch.ops.aten


# Backward of each activation: (gradient w.r.t. its output, its input z, its output h) -> gradient
# w.r.t. z, with the ATen kernels autograd itself uses.
ACTIVATION_BACKWARD: dict[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]]
ACTIVATION_BACKWARD = {
    "sigmoid": lambda g, z, h: _aten.sigmoid_backward(g, h),
    "relu": lambda g, z, h: _aten.threshold_backward(g, h, 0),
    "tanh": lambda g, z, h: _aten.tanh_backward(g, h),
    "gelu": lambda g, z, h: _aten.gelu_backward(g, z),
    "elu": lambda g, z, h: _aten.elu_backward(g, 1.0, 1, 1, False, z),
    "leaky_relu": lambda g, z, h: _aten.leaky_relu_backward(g, z, 0.01, False),
    "identity": lambda g, z, h: g,
}
assert set(ACTIVATION_BACKWARD) == set(ACTIVATIONS)


class StackedMLP:
    """K MLPs of one architecture as stacked tensors, bound to the K models' own parameters.

    Layer l's weights are one tensor ``[K, out, in]`` and its biases ``[K, out]`` (likewise their
    gradients); model k's ``layers[l].weight`` is the view ``[k]`` of it, for data and gradient.
    Activations are transposed, ``[K, features, batch]``; logits are ``[K, classes, batch]``.
    """

    class_dim = 1  # logits are [K, classes, batch]

    def __init__(self, models: Sequence[torch.nn.Module]) -> None:
        self.activations = list(models[0].activations)
        self.models: list[torch.nn.Module] = []
        self.weights: list[torch.Tensor] = []
        self.biases: list[torch.Tensor] = []
        self.weight_grads: list[torch.Tensor] = []
        self.bias_grads: list[torch.Tensor] = []
        self._saved: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._x: torch.Tensor | None = None
        self.restack(models)

    def __len__(self) -> int:
        return len(self.models)

    @torch.no_grad()
    def restack(self, models: Sequence[torch.nn.Module]) -> None:
        """(Re)build the stacked tensors from `models`' current weights and bind each model's
        parameters and gradients to views of them."""
        self.models = list(models)
        n_layers = len(self.models[0].layers)
        self.weights = [torch.stack([m.layers[i].weight for m in models]) for i in range(n_layers)]
        self.biases = [torch.stack([m.layers[i].bias for m in models]) for i in range(n_layers)]
        self.weight_grads = [torch.zeros_like(w) for w in self.weights]
        self.bias_grads = [torch.zeros_like(b) for b in self.biases]
        for k, model in enumerate(self.models):
            for i, layer in enumerate(model.layers):
                layer.weight.data = self.weights[i][k]
                layer.weight.grad = self.weight_grads[i][k]
                layer.bias.data = self.biases[i][k]
                layer.bias.grad = self.bias_grads[i][k]
        self._saved, self._x = [], None

    def tensors(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(stacked parameter, its stacked gradient) pairs: the weights, then the biases."""
        return list(
            zip(self.weights + self.biases, self.weight_grads + self.bias_grads, strict=True)
        )

    def views(self, k: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """(model k's parameter, its data view, its gradient view) triples."""
        triples = []
        for i, layer in enumerate(self.models[k].layers):
            triples.append((layer.weight, self.weights[i][k], self.weight_grads[i][k]))
            triples.append((layer.bias, self.biases[i][k], self.bias_grads[i][k]))
        return triples

    @torch.no_grad()
    def forward(self, x: torch.Tensor, keep: bool = False, per_model: bool = False) -> torch.Tensor:
        """Logits ``[K, classes, batch]`` of the K models for the shared input `x` ``[batch, in]``
        (one product for all) or, `per_model`, for an input per model ``[K, batch, in]``;
        `keep` saves what `backward` needs."""
        k, batch = len(self.models), x.shape[-2]
        w0 = self.weights[0]
        if per_model:
            z = torch.baddbmm(self.biases[0].unsqueeze(-1), w0, x.transpose(1, 2))
        else:
            z = torch.addmm(self.biases[0].reshape(-1, 1), w0.reshape(-1, w0.shape[-1]), x.T)
            z = z.view(k, -1, batch)
        saved = []
        for i, name in enumerate(self.activations, start=1):
            h = ACTIVATIONS[name](z)
            saved.append((z, h))
            z = torch.baddbmm(self.biases[i].unsqueeze(-1), self.weights[i], h)
        if keep:
            self._saved, self._x = saved, x
        return z

    @torch.no_grad()
    def backward(self, grad: torch.Tensor) -> None:
        """Write the gradients of the K models' losses into the stacked gradient tensors, given
        `grad`, the gradient w.r.t. the logits of the last `forward(..., keep=True)`."""
        assert self._x is not None, "backward() needs a forward(keep=True) first"
        for i in range(len(self.activations), 0, -1):
            z, h = self._saved[i - 1]
            torch.bmm(grad, h.transpose(1, 2), out=self.weight_grads[i])
            torch.sum(grad, dim=2, out=self.bias_grads[i])
            grad_h = torch.bmm(self.weights[i].transpose(1, 2), grad)
            grad = ACTIVATION_BACKWARD[self.activations[i - 1]](grad_h, z, h)
        g0 = self.weight_grads[0]
        if self._x.dim() == 3:  # an input per model
            torch.bmm(grad, self._x, out=g0)
        else:
            torch.mm(grad.reshape(-1, grad.shape[-1]), self._x, out=g0.view(-1, g0.shape[-1]))
        torch.sum(grad, dim=2, out=self.bias_grads[0])
