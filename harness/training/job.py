"""A job: one run to train, with its problem resolved once.

A sweep's jobs are walked from planning (harness.sweeps.launcher) through checking, data loading,
building and training (harness.training.run, harness.stacking.stacked) to their results. The problem
a config selects (harness.problems.problem_of) is looked up once, when the job is made, and travels
with it, so that no step goes back up to find it again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig

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
