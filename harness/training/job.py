"""A job: one run to train, with what follows from its config resolved once.

A sweep's jobs are walked from planning (harness.sweeps.launcher) through checking, data loading,
building and training (harness.training.run, harness.stacking.stacked) to their results. What
their steps ask of a job's config again and again (its problem, device, run length, data key,
config hash and id, optimizer key) is worked out once, the first time it is asked, and travels
with the job, so that no step goes back up to find it again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from harness.config.devices import resolve_device
from harness.config.identity import config_hash, config_id
from harness.config.targets import node_key
from harness.problems import Problem, problem_of
from harness.training.datasets import data_key, run_length


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
