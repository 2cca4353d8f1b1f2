"""A job: one run to train, with what follows from its config resolved once, and its data set,
loaded once per process.

A sweep's jobs are walked from planning (harness.sweeps.plan) through checking, data loading,
building and training (harness.training.run, harness.stacking.stack) to their results. What
their steps ask of a job's config again and again (its problem, device, run length, data key,
config hash and id, optimizer key) is worked out once, the first time it is asked, and travels
with the job, so that no step goes back up to find it again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from harness.config.class_paths import node_key
from harness.config.devices import resolve_device
from harness.config.identity import config_hash, config_id
from harness.problems import Problem, problem_of


@dataclass(frozen=True)
class Job:
    """A run's resolved config, its folder, the config-group choices it was composed from (they
    identify it in the tables: model, optimizer, ...), and its problem."""

    cfg: DictConfig
    out_dir: Path
    choices: Mapping[str, str] = field(default_factory=dict)
    problem: Problem = field(default=None)  # type: ignore[assignment] - set by `of`

    @classmethod
    def of(cls, cfg: DictConfig, out_dir: Path | str, choices: Mapping[str, str] | None = None):
        """The job of `cfg`, its problem resolved here, once."""
        return cls(cfg, Path(out_dir), dict(choices or {}), problem_of(cfg))

    @cached_property
    def device(self) -> torch.device:
        """The device it trains on (`device=auto`: a GPU where there is one)."""
        return resolve_device(self.cfg.device)

    @cached_property
    def run_length(self) -> int:
        """The steps its run takes (its data loaded only for an epochs budget)."""
        return run_length(self)

    @cached_property
    def data_key(self) -> str:
        """Its data config as JSON: jobs with the same one train on the same data."""
        return data_key(self.cfg)

    @cached_property
    def config_hash(self) -> str:
        """The hash of what it computes: what finds it finished, and its checkpoint."""
        return config_hash(OmegaConf.to_container(self.cfg, resolve=True))

    @cached_property
    def config_id(self) -> str:
        """The identity its seeds share."""
        return config_id(self.cfg)

    @cached_property
    def optimizer_key(self) -> str:
        """Its optimizer config as YAML: what the optimizer checks know it by."""
        return node_key(self.cfg.optimizer)


# --- the job's data set: loaded once per process, and what follows from it before training
# (the size of its training set, the steps its run takes). The jobs of a sweep that run in one
# process load their data set once (MNIST: seconds); a sweep's worker processes are handed the
# planner's (`adopt_data`) instead of parsing it again.

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
