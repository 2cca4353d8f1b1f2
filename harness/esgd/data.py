"""The data of an ESGD run: the training set split into an SGD part and a held-out fitness part."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from omegaconf import DictConfig, OmegaConf

from harness.data import TensorData
from harness.errors import ConfigError
from harness.run import build

SPLIT_SEED = 0  # the held-out split is part of the problem, the same for every seed and method


@dataclass(frozen=True)
class Split:
    x_train: torch.Tensor  # SGD steps draw their mini-batches from here
    y_train: torch.Tensor
    x_fit: torch.Tensor  # held out of the training data: fitness, back-off and selection
    y_fit: torch.Tensor
    x_test: torch.Tensor  # reported in the tables, never used to choose anything
    y_test: torch.Tensor


@functools.lru_cache(maxsize=2)
def _load(data_yaml: str) -> TensorData:
    return build(OmegaConf.create(data_yaml))


def split_data(
    cfg: DictConfig, fitness_size: int, device: torch.device, dtype: torch.dtype
) -> Split:
    """MNIST as `cfg.data` says, with `fitness_size` random training examples held out."""
    data = _load(OmegaConf.to_yaml(cfg.data, resolve=True)).to(device, dtype)
    n = len(data.y_train)
    if fitness_size >= n - cfg.train.batch_size:
        raise ConfigError(
            f"esgd.fitness_size ({fitness_size}) leaves fewer than train.batch_size "
            f"({cfg.train.batch_size}) of the {n} training examples for SGD"
        )
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
