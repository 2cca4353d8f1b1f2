"""Hydra launcher `hydra/launcher=stacked`, the default of `harness-train -m`: Hydra's side of a
sweep. Hydra only loads launchers from `hydra_plugins`, so this adapter lives here; the sweep's
life (compose → resume → check → plan → train) is harness.sweeps.sweep's, read there top to
bottom. What this class adds is Hydra's: its composer in place of Hydra's config loader, one
JobReturn per job (its run.json record as a `RunRecord`, which a sweeper that optimises reads
as the run's validation quality), the job log set up once in the sweep folder, and the
callbacks' on_job_start / on_job_end around each trained job.
"""

# No `from __future__ import annotations`: Hydra's plugin scan loads this module outside
# sys.modules, where dataclasses cannot resolve string annotations.

import copy
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hydra.core.utils import (
    JobReturn,
    JobStatus,
    configure_log,
    env_override,
    filter_overrides,
    setup_globals,
)
from hydra.experimental.callback import Callback
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict, read_write

from harness.sweeps.compose import ComposingConfigLoader, SweepComposer

if TYPE_CHECKING:
    from harness.sweeps.sweep import SweepJob

log = logging.getLogger(__name__)


def _defines_job_callbacks(callbacks: Sequence[Callback]) -> bool:
    return any(
        type(c).on_job_start is not Callback.on_job_start
        or type(c).on_job_end is not Callback.on_job_end
        for c in callbacks
    )


class StackedLauncher(Launcher):
    def __init__(
        self,
        n_jobs: int = -1,
        max_stack: int | None = None,
        max_stack_s: float | None = None,
        checkpoint_every_s: float | None = None,
        use_workers: bool | None = None,
    ) -> None:
        self.n_jobs, self.max_stack, self.max_stack_s = n_jobs, max_stack, max_stack_s
        self.checkpoint_every_s, self.use_workers = checkpoint_every_s, use_workers
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None
        self.composer: SweepComposer | None = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function
        self.composer = SweepComposer(hydra_context.config_loader, config)
        # The sweeper composes each job to check its batch before launching it: the same way.
        hydra_context.config_loader = ComposingConfigLoader(  # type: ignore[assignment]
            hydra_context.config_loader, self.composer
        )

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        from harness.results import RunRecord
        from harness.sweeps import sweep

        assert self.config is not None and self.composer is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        log.info(f"Stacked launcher: {len(job_overrides)} jobs")
        jobs = sweep.prepare(
            self.composer,
            job_overrides,
            initial_job_idx,
            sweep_dir,
            lambda num, overrides: log.info(f"\t#{num} : {' '.join(filter_overrides(overrides))}"),
        )
        returns = [self._job_return(job) for job in jobs]
        to_train = [job for job in jobs if job.finished is None]
        if to_train:
            for job, record in zip(to_train, self._train(to_train, sweep_dir), strict=True):
                returns[jobs.index(job)].return_value = RunRecord(record)
        else:
            sweep.nothing_to_train(sweep_dir)
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        return returns

    def _job_return(self, job: "SweepJob") -> JobReturn:
        assert self.config is not None
        result = JobReturn(
            overrides=job.overrides,
            cfg=job.cfg,
            working_dir=str(job.out_dir),
            task_name=self.config.hydra.job.name,
            status=JobStatus.COMPLETED,
        )
        result.return_value = job.finished
        return result

    def _train(self, jobs: list["SweepJob"], sweep_dir: Path) -> list[dict]:
        from harness.sweeps import sweep

        assert self.config is not None
        per_job = self._start_jobs(jobs, sweep_dir)
        with env_override(dict(self.config.hydra.job.env_set)):
            records = sweep.train(
                jobs,
                sweep_dir,
                workers=None if self.n_jobs < 1 else self.n_jobs,
                use_workers=self.use_workers,
                max_stack=self.max_stack,
                max_stack_s=self.max_stack_s,
                checkpoint_every_s=self.checkpoint_every_s,
            )
        self._end_jobs(jobs, records, sweep_dir, per_job)
        return records

    def _end_jobs(
        self, jobs: list["SweepJob"], records: list[dict], sweep_dir: Path, per_job: bool
    ) -> None:
        """The callbacks' on_job_end for each trained job, where they define it."""
        from harness.results import RunRecord
        from harness.sweeps import sweep

        assert self.hydra_context is not None and self.composer is not None
        for job, record in zip(jobs, records, strict=True) if per_job else ():
            result = self._job_return(job)
            result.return_value = RunRecord(record)
            config = sweep.job_config(self.composer, job.num, job.sweep_overrides, sweep_dir)
            self.hydra_context.callbacks.on_job_end(config=config, job_return=result)

    def _start_jobs(self, jobs: list["SweepJob"], sweep_dir: Path) -> bool:
        """Before the jobs train: their run folders with Hydra's files, the job log, the
        callbacks' on_job_start. Whether the callbacks want on_job_end per job."""
        from harness.sweeps import sweep

        assert self.config is not None and self.hydra_context is not None
        assert self.composer is not None
        sweep.make_run_folders(jobs, self.config.hydra.output_subdir)
        self._configure_job_log(sweep_dir)
        callbacks = self.hydra_context.callbacks
        per_job = _defines_job_callbacks(callbacks.callbacks)
        for job in jobs if per_job else ():
            config = sweep.job_config(self.composer, job.num, job.sweep_overrides, sweep_dir)
            callbacks.on_job_start(config=config, task_function=self.task_function)
        return per_job

    def _configure_job_log(self, sweep_dir: Path) -> None:
        """Hydra's job logging (hydra.job_logging), set up once, with its file in the sweep
        folder: the stacked runs of a sweep log together."""
        assert self.config is not None
        config = copy.deepcopy(self.config)
        with read_write(config.hydra), open_dict(config.hydra):
            config.hydra.runtime.output_dir = str(sweep_dir)
        configure_log(config.hydra.job_logging, config.hydra.verbose)
