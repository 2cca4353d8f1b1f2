"""Named activations of layer chains: the classification MLPs apply them, and the hand-written
stack (harness.stacking.mlp) applies the same functions, so a model trains to the same bits alone
and stacked. Here, beside the `Problem` interface, so that the stacked engine needs no problem's
own package."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "sigmoid": torch.sigmoid,
    "relu": torch.relu,
    "tanh": torch.tanh,
    "gelu": nn.functional.gelu,
    "elu": nn.functional.elu,
    "leaky_relu": nn.functional.leaky_relu,
    "identity": lambda x: x,
}
