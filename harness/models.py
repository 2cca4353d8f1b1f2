"""Multi-layer perceptrons: the course's net1/net2/net3 and the general `mlp` family.

Initial weights are drawn from an explicit generator, layer by layer (weight, then bias), so a
config and seed always give the same network, whichever engine trains it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import nn

from harness.errors import ConfigError

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "sigmoid": torch.sigmoid,
    "relu": torch.relu,
    "tanh": torch.tanh,
    "gelu": nn.functional.gelu,
    "elu": nn.functional.elu,
    "leaky_relu": nn.functional.leaky_relu,
    "identity": lambda x: x,
}
INITS = ("default", "gaussian")


def resolve_activations(hidden: Sequence[int], activations: Sequence[str]) -> list[str]:
    """One activation per hidden layer; a single activation is used for every layer."""
    activations = list(activations)
    if len(activations) == 1:
        activations *= len(hidden)
    if len(activations) != len(hidden):
        raise ConfigError(
            f"model.activations must have one entry per hidden layer ({len(hidden)}) or a single "
            f"entry, got {len(activations)}"
        )
    unknown = [a for a in activations if a not in ACTIVATIONS]
    if unknown:
        raise ConfigError(
            f"unknown activation {unknown[0]!r}; valid: {', '.join(sorted(ACTIVATIONS))}"
        )
    return activations


def init_linear_(
    weight: torch.Tensor,
    bias: torch.Tensor,
    scheme: str,
    std: float,
    generator: torch.Generator,
) -> None:
    """Initialise one linear layer in place.

    default: PyTorch's nn.Linear rule, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias.
    gaussian: the course's small random weights, N(0, std^2), and zero biases.
    """
    with torch.no_grad():
        if scheme == "default":
            bound = 1.0 / math.sqrt(weight.shape[1])
            weight.uniform_(-bound, bound, generator=generator)
            bias.uniform_(-bound, bound, generator=generator)
        elif scheme == "gaussian":
            weight.normal_(0.0, std, generator=generator)
            bias.zero_()
        else:
            raise ConfigError(f"unknown model.init {scheme!r}; valid: {', '.join(INITS)}")


class MLP(nn.Module):
    """Linear layers with an activation after each hidden one; outputs logits (the softmax is
    part of the cross-entropy loss)."""

    def __init__(
        self,
        in_features: int,
        num_classes: int,
        hidden: Sequence[int],
        activations: Sequence[str],
        init: str = "default",
        init_std: float = 0.1,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.activations = resolve_activations(hidden, activations)
        sizes = [in_features, *hidden, num_classes]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:], strict=False))
        generator = generator if generator is not None else torch.Generator().manual_seed(0)
        for layer in self.layers:
            init_linear_(layer.weight, layer.bias, init, init_std, generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer, activation in zip(self.layers, self.activations, strict=False):
            x = ACTIVATIONS[activation](layer(x))
        return self.layers[-1](x)
