"""A job's data set, loaded once per process, and what follows from it before training: the
size of its training set and the steps its run takes (`train.iterations`, or `train.epochs` of
that training set).

The jobs of a sweep that run in one process load their data set once (MNIST: seconds); a
sweep's worker processes are handed the planner's (`adopt_data`) instead of parsing it again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

from harness.config.targets import node_key

if TYPE_CHECKING:
    from harness.problems import Problem
    from harness.training.job import Job

# Loaded data sets by their data config (`data_key`), the oldest dropped beyond _DATA_KEPT.
_DATA: dict[str, Any] = {}
_DATA_KEPT = 2  # the most data sets this process loads and keeps
_ON_DEVICE: dict[tuple, Any] = {}  # the last data set moved to a device and dtype (`data_on`)


def data_key(cfg: DictConfig) -> str:
    """A data config, resolved, as JSON: runs with the same one train on the same data."""
    return node_key(cfg.data, as_json=True)


def load_data(cfg: DictConfig, problem: Problem) -> Any:
    """The data set of `cfg`, as its `problem` loads it, loaded once per process."""
    key = data_key(cfg)
    if key not in _DATA:
        if len(_DATA) >= _DATA_KEPT:
            del _DATA[next(iter(_DATA))]  # the oldest
        _DATA[key] = problem.load(cfg)
    return _DATA[key]


def data_on(cfg: DictConfig, problem: Problem, device: Any, dtype: Any) -> Any:
    """The data set of `cfg` moved to `device` in `dtype` (`problem.to`), once per process: the
    runs of a stack, and the stacks of a worker, share one copy on a GPU instead of copying it
    each (on the CPU in float32 it is the loaded data itself). The last one is kept."""
    key = (data_key(cfg), problem, str(device), str(dtype))
    if key not in _ON_DEVICE:
        _ON_DEVICE.clear()
        _ON_DEVICE[key] = problem.to(load_data(cfg, problem), device, dtype)
    return _ON_DEVICE[key]


def adopt_data(datasets: dict[str, Any]) -> None:
    """Use these tensors for these data configs (`data_key`): data loaded by another process."""
    _DATA.update(datasets)


def train_size(job: Job) -> int:
    """Examples in the job's training set (its validation split held out)."""
    return job.problem.size(load_data(job.cfg, job.problem))


def iterations_of(train: DictConfig, n_train: int) -> int:
    """The steps of a run with the `train` settings on `n_train` training examples: its
    iterations, else its epochs of whole batches (an epoch's incomplete last batch dropped)."""
    if train.iterations is not None:
        return int(train.iterations)
    return int(train.epochs) * (n_train // train.batch_size)


def run_length(job: Job) -> int:
    """The steps the job's run takes (`iterations_of`; its data loaded only for an epochs
    budget): what a run-length argument gets (Ranger21's num_iterations), in a probe too."""
    train = job.cfg.train
    return iterations_of(train, 0 if train.iterations is not None else train_size(job))
