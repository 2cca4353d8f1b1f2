"""The data of an ESGD run: the training rows SGD steps on, the validation rows held out of the
training data (`data.val_size`, the harness's one validation split) that fitness, back-off and
selection measure, and the test set, which only feeds the tables."""

from __future__ import annotations

from typing import Any

from harness.errors import ConfigError
from harness.problems import Problem


def checked_data(problem: Problem, data: Any, batch_size: int) -> Any:
    """`data` (the classification problem's, on the study's device), checked for ESGD: fitness
    needs its validation split, SGD a mini-batch of training rows."""
    # settings() refuses data.val_size=0 before the data is loaded
    if "val" not in problem.held_out(data):
        raise ConfigError(
            "ESGD measures fitness on training examples held out of SGD: set data.val_size > 0"
        )
    if problem.size(data) < batch_size:
        raise ConfigError(
            f"SGD has {problem.size(data)} training examples (data.train_size, or what "
            f"data.val_size leaves), fewer than train.batch_size ({batch_size})"
        )
    return data
