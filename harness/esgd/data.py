"""The data of an ESGD run: the training rows SGD steps on, the validation rows held out of the
training data (`data.val_size`, the harness's one validation split) that fitness, back-off and
selection measure, and the test set, which only feeds the tables."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.data import TensorData
from harness.errors import ConfigError


@dataclass(frozen=True)
class Split:
    x_train: torch.Tensor  # SGD steps draw their mini-batches from here
    y_train: torch.Tensor
    x_fit: torch.Tensor  # held out of the training data: fitness, back-off and selection
    y_fit: torch.Tensor
    x_test: torch.Tensor  # reported in the tables, never used to choose anything
    y_test: torch.Tensor


def split_data(data: TensorData, batch_size: int) -> Split:
    """`data` (the classification problem's, on the study's device) as ESGD uses it: fitness on
    its validation split."""
    if data.y_val is None:  # settings() refuses data.val_size=0 before the data is loaded
        raise ConfigError(
            "ESGD measures fitness on training examples held out of SGD: set data.val_size > 0"
        )
    if len(data.y_train) < batch_size:
        raise ConfigError(
            f"SGD has {len(data.y_train)} training examples (data.train_size, or what "
            f"data.val_size leaves), fewer than train.batch_size ({batch_size})"
        )
    return Split(data.x_train, data.y_train, data.x_val, data.y_val, data.x_test, data.y_test)
