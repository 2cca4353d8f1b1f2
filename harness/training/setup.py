"""What a run is trained on and how long (`Setup`: its problem's data on its device, the rows
whose training metrics are recorded, its schedule of steps, evaluations and logs), shared by
every run of a sweep with its config, and the seeds a run draws from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from harness.errors import ConfigError
from harness.problems import Problem
from harness.training import engine
from harness.training.job import Job, data_on, iterations_of


@dataclass(frozen=True)
class Setup:
    """What a run is trained on and how long: its problem, the problem's data on the run's
    device, the fixed training rows whose metrics are recorded, and the schedule. Shared by
    every run of a sweep with this config."""

    problem: Problem
    data: Any
    eval_train_idx: torch.Tensor
    schedule: engine.Schedule


def run_seeds(seed: int) -> tuple[int, int]:
    """Independent seeds for weight initialisation and data order, derived from the run's seed."""
    init_seed, order_seed = np.random.SeedSequence(seed).generate_state(2)
    return int(init_seed), int(order_seed)


def load_setup(job: Job, device: torch.device, dtype: torch.dtype) -> Setup:
    cfg, problem = job.cfg, job.problem
    data = data_on(cfg, problem, device, dtype)
    n_train = problem.size(data)
    train = cfg.train
    if train.batch_size > n_train:
        raise ConfigError(
            f"train.batch_size ({train.batch_size}) is larger than the training set ({n_train})"
        )
    iterations = iterations_of(train, n_train)
    # The train-loss subset is fixed (not seeded by the run) so that all runs share it.
    eval_size = min(train.eval_train_size or n_train, n_train)
    eval_idx = torch.randperm(n_train, generator=torch.Generator().manual_seed(0))[:eval_size]
    schedule = engine.Schedule(
        batch_size=train.batch_size,
        iterations=iterations,
        eval_every=train.eval_every,
        log_every=train.log_every,
        divergence_factor=train.divergence_factor,
    )
    return Setup(problem, data, eval_idx.sort().values.to(device), schedule)
