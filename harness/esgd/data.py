"""The data of an ESGD run: the training set split into an SGD part and a held-out fitness part."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.data import TensorData
from harness.errors import ConfigError

SPLIT_SEED = 0  # the held-out split is part of the problem, the same for every seed and method


@dataclass(frozen=True)
class Split:
    x_train: torch.Tensor  # SGD steps draw their mini-batches from here
    y_train: torch.Tensor
    x_fit: torch.Tensor  # held out of the training data: fitness, back-off and selection
    y_fit: torch.Tensor
    x_test: torch.Tensor  # reported in the tables, never used to choose anything
    y_test: torch.Tensor


def split_data(data: TensorData, fitness_size: int, batch_size: int) -> Split:
    """`data` (the classification problem's, on the study's device) with `fitness_size` random
    training examples held out."""
    n = len(data.y_train)
    if fitness_size >= n - batch_size:
        raise ConfigError(
            f"esgd.fitness_size ({fitness_size}) leaves fewer than train.batch_size "
            f"({batch_size}) of the {n} training examples for SGD"
        )
    device = data.y_train.device
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(SPLIT_SEED)).to(device)
    fit, train = perm[:fitness_size].sort().values, perm[fitness_size:].sort().values
    return Split(
        data.x_train[train],
        data.y_train[train],
        data.x_train[fit],
        data.y_train[fit],
        data.x_test,
        data.y_test,
    )
