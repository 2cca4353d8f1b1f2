"""The data of an ESGD run: the training rows SGD steps on, the validation rows held out of the
training data (`data.val_size`, the harness's one validation split) that fitness, back-off and
selection measure, and the test set, which only feeds the tables."""

from __future__ import annotations

from harness.errors import ConfigError
from harness.problems.classification.mnist import TensorData


def checked_data(data: TensorData, batch_size: int) -> TensorData:
    """`data` (the classification problem's, on the study's device), checked for ESGD: fitness
    needs its validation split, SGD a mini-batch of training rows."""
    if data.y_val is None:  # settings() refuses data.val_size=0 before the data is loaded
        raise ConfigError(
            "ESGD measures fitness on training examples held out of SGD: set data.val_size > 0"
        )
    if len(data.y_train) < batch_size:
        raise ConfigError(
            f"SGD has {len(data.y_train)} training examples (data.train_size, or what "
            f"data.val_size leaves), fewer than train.batch_size ({batch_size})"
        )
    return data
