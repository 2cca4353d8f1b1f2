"""Hydra launcher `hydra/launcher=stacked`: trains a sweep's compatible runs together with the
stacked engine (see harness.launcher). Hydra only loads launchers from `hydra_plugins`, so the
class lives here; the work is done by harness.launcher."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from hydra.core.utils import (
    JobReturn,
    configure_log,
    filter_overrides,
    run_job,
    setup_globals,
)
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict

log = logging.getLogger(__name__)


class StackedLauncher(Launcher):
    def __init__(self, n_jobs: int = -1) -> None:
        self.n_jobs = n_jobs
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        from harness.launcher import deferring, train_deferred

        assert self.config is not None and self.hydra_context is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        log.info(f"Collecting {len(job_overrides)} jobs for the stacked engine")
        returns: list[JobReturn] = []
        return_of_job: dict[int, int] = {}  # deferred job index -> position in `returns`
        with deferring() as pending:
            for idx, overrides in enumerate(job_overrides, initial_job_idx):
                log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
                sweep_config = self.hydra_context.config_loader.load_sweep_config(
                    self.config, list(overrides)
                )
                with open_dict(sweep_config):
                    sweep_config.hydra.job.id = sweep_config.hydra.job.num = idx
                deferred_before = len(pending)
                returns.append(
                    run_job(
                        hydra_context=self.hydra_context,
                        task_function=self.task_function,
                        config=sweep_config,
                        job_dir_key="hydra.sweep.dir",
                        job_subdir_key="hydra.sweep.subdir",
                    )
                )
                configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
                if len(pending) > deferred_before:  # the job handed itself to the stacked engine
                    return_of_job[pending[-1].index] = len(returns) - 1
        # The deferred jobs train now; their returns get the run records.
        for index, record in train_deferred(pending, self.n_jobs).items():
            returns[return_of_job[index]].return_value = record
        return returns
