"""The classification models: multi-layer perceptrons (the course's net1/net2/net3 and the
general `mlp` family) and a small convolutional net (`lenet`).

Initial weights are drawn from an explicit generator, layer by layer (weight, then bias), so a
config and seed always give the same network, whichever engine trains it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from harness.errors import ConfigError
from harness.problems.layers import ACTIVATIONS

INITS = ("default", "gaussian")
# A model config's initialisation keys: models that differ only in these stack together.
INIT_KEYS = ("init", "init_std")


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

    default: PyTorch's nn.Linear (and nn.Conv2d) rule, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for
    weight and bias, fan_in being the inputs of one output unit.
    gaussian: the course's small random weights, N(0, std^2), and zero biases.
    """
    with torch.no_grad():
        if scheme == "default":
            bound = 1.0 / math.sqrt(weight[0].numel())
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


class LeNet(nn.Module):
    """A small convolutional net after LeCun et al. (1998), for square one-channel images given
    as flat rows (MNIST's 784 pixels): two 5 x 5 convolutions (the first padded to keep the
    size), each followed by the activation and 2 x 2 max pooling, then fully connected layers
    with the activation, and the logits. Weights are drawn from `generator` layer by layer, as
    the MLP's are."""

    def __init__(
        self,
        in_features: int,
        num_classes: int,
        channels: Sequence[int] = (6, 16),
        hidden: Sequence[int] = (120, 84),
        activation: str = "relu",
        init: str = "default",
        init_std: float = 0.1,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.side = lenet_side(in_features)
        self.activation = resolve_activations([1], [activation])[0]
        c1, c2 = channels
        self.conv1 = nn.Conv2d(1, c1, 5, padding=2)
        self.conv2 = nn.Conv2d(c1, c2, 5)
        sizes = [c2 * lenet_pooled(self.side) ** 2, *hidden, num_classes]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:], strict=False))
        generator = generator if generator is not None else torch.Generator().manual_seed(0)
        for layer in (self.conv1, self.conv2, *self.layers):
            init_linear_(layer.weight, layer.bias, init, init_std, generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        act = ACTIVATIONS[self.activation]
        x = x.reshape(-1, 1, self.side, self.side)
        x = nn.functional.max_pool2d(act(self.conv1(x)), 2)
        x = nn.functional.max_pool2d(act(self.conv2(x)), 2).flatten(1)
        for layer in self.layers[:-1]:
            x = act(layer(x))
        return self.layers[-1](x)


def lenet_side(in_features: int) -> int:
    """The side of the square images of `in_features` pixels; a ConfigError if they are not."""
    side = math.isqrt(in_features)
    if side * side != in_features or side < 12:
        raise ConfigError(f"LeNet needs square images of side >= 12, got {in_features} features")
    return side


def lenet_pooled(side: int) -> int:
    """The side of LeNet's feature maps after the second pooling: side/2, then -4, then /2."""
    return (side // 2 - 4) // 2


def lenet_multiply_adds(
    in_features: int, num_classes: int, channels: Sequence[int], hidden: Sequence[int]
) -> int:
    """Multiply-adds of one forward pass of one example through LeNet."""
    side = lenet_side(in_features)
    c1, c2 = channels
    conv = side * side * c1 * 25 + (side // 2 - 4) ** 2 * c2 * c1 * 25
    sizes = [c2 * lenet_pooled(side) ** 2, *hidden, num_classes]
    return conv + sum(a * b for a, b in zip(sizes, sizes[1:], strict=False))


# The config targets of the built-in models.
MLP_TARGET = f"{MLP.__module__}.{MLP.__qualname__}"
LENET_TARGET = f"{LeNet.__module__}.{LeNet.__qualname__}"
