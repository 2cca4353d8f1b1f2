"""Hydra launcher `hydra/launcher=stacked`, the default of `harness-train -m`: a sweep's jobs are
composed, checked and trained together, by the fastest exact path (harness.sweeps.launcher decides
which engine trains what, and where). Hydra only loads launchers from `hydra_plugins`, so the
class lives here.

Hydra's basic launcher runs the app once per job, each job composing its config from scratch,
writing Hydra's files and setting up its own logging before it trains. This launcher instead

1. composes every job (`SweepComposer`: Hydra's composition, once per set of config-group
   choices);
2. skips the jobs whose config already finished in the sweep folder (harness.sweeps.finished);
3. checks every other job (`run.check`): a bad value in any job stops the sweep before any run
   folder is created. Each optimizer's first step is checked and timed once per sweep, and
   how each optimizer config stacks is probed once: the outcomes are kept in the sweep folder
   (`planning.json`, harness.training.preflight) for its resumes;
4. creates the run folders with Hydra's `.hydra/` files (config.yaml, hydra.yaml,
   overrides.yaml), sets up logging once (the log goes to the sweep folder) and trains the
   jobs (harness.sweeps.launcher.execute_jobs);
5. returns one JobReturn per job: its run.json record as a `RunRecord` (a skipped job's from its
   finished folder), which a sweeper that optimises reads as the run's validation quality.
   Callbacks that define on_job_start / on_job_end are called for each trained job, before and
   after training.
"""

# No `from __future__ import annotations`: Hydra's plugin scan loads this module outside
# sys.modules, where dataclasses cannot resolve string annotations.

import copy
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from hydra.core.hydra_config import HydraConfig
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
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from hydra_plugins.harness_launcher.compose import ComposingConfigLoader, SweepComposer

if TYPE_CHECKING:  # imported at run time where jobs train: it imports torch
    from harness.training.job import Job

log = logging.getLogger(__name__)


@dataclass
class _Job:
    num: int  # Hydra's job number
    sweep_overrides: list[str]  # as the sweeper gave them
    overrides: list[str]  # the job's (non-Hydra) overrides
    resolved: dict[str, Any]  # its config, resolved: training no longer needs Hydra's runtime
    cfg: DictConfig  # the same, as a config
    out_dir: Path
    choices: dict[str, str]
    files: dict[str, str]  # Hydra's files in <out_dir>/.hydra: name -> YAML


# A job to train: Hydra's (`_Job`), the return Hydra gets for it, and the harness job that
# trains it (its problem resolved).
Prepared = tuple[_Job, JobReturn, "Job"]


def _yaml(data: Any) -> str:
    # libyaml's emitter: the text OmegaConf.to_yaml writes, ~4x faster.
    return yaml.dump(data, Dumper=yaml.CSafeDumper, sort_keys=False, allow_unicode=True)


def _resolved_task(config: DictConfig) -> dict[str, Any]:
    """A job's config without Hydra's node, interpolations resolved."""
    task = {}
    for key in config:
        if key != "hydra":
            value = config[key]  # a scalar is resolved when read
            is_node = OmegaConf.is_config(value)
            task[key] = OmegaConf.to_container(value, resolve=True) if is_node else value
    return task


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

    def _job_config(self, num: int, overrides: Sequence[str], sweep_dir: Path) -> DictConfig:
        """Job `num`'s config as Hydra's run_job sets it (the composer's working copy)."""
        assert self.composer is not None
        config = self.composer.compose(overrides)
        with read_write(config.hydra), open_dict(config.hydra):
            config.hydra.job.id = config.hydra.job.num = num
            out_dir = sweep_dir / str(OmegaConf.select(config, "hydra.sweep.subdir"))
            config.hydra.runtime.output_dir = os.path.abspath(out_dir)
        return config

    def _prepare(self, num: int, overrides: Sequence[str], sweep_dir: Path) -> _Job:
        """Job `num`, ready to train, without writing anything."""
        config = self._job_config(num, overrides, sweep_dir)
        written = OmegaConf.to_container(config, enum_to_str=True)
        hydra = written.pop("hydra")
        task_yaml = _yaml(written)
        if "${hydra:" in task_yaml:  # the `hydra` resolver reads Hydra's global job config
            HydraConfig.instance().set_config(config)
        task_overrides = list(config.hydra.overrides.task)
        resolved = _resolved_task(config)
        return _Job(
            num,
            list(overrides),
            task_overrides,
            resolved,
            OmegaConf.create(resolved),
            Path(config.hydra.runtime.output_dir),
            dict(config.hydra.runtime.choices),
            {
                "config.yaml": task_yaml,
                "hydra.yaml": _yaml({"hydra": hydra}),
                "overrides.yaml": _yaml(task_overrides),
            },
        )

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        from harness.errors import ConfigError
        from harness.esgd import ONE_STUDY_PER_COMMAND
        from harness.results import CHECKPOINTS_FOLDER, PLANNING_FILE
        from harness.sweeps.finished import resumed
        from harness.training import preflight  # torch is imported only when jobs train
        from harness.training import run as run_module
        from harness.training.job import Job

        assert self.config is not None and self.hydra_context is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        log.info(f"Stacked launcher: {len(job_overrides)} jobs")
        returns: list[JobReturn] = []
        jobs: list[Prepared] = []
        kept = preflight.load(sweep_dir / PLANNING_FILE)
        for num, overrides in enumerate(job_overrides, initial_job_idx):
            log.info(f"\t#{num} : {' '.join(filter_overrides(overrides))}")
            job = self._prepare(num, overrides, sweep_dir)
            result = JobReturn(
                overrides=job.overrides,
                cfg=job.cfg,
                working_dir=str(job.out_dir),
                task_name=self.config.hydra.job.name,
                status=JobStatus.COMPLETED,
            )
            returns.append(result)
            # a finished run's record, for a sweeper that reads the results (Optuna): resumed
            # trials tell it what they told it the first time
            result.return_value = resumed(job.resolved, sweep_dir, job.out_dir, job.choices)
            if result.return_value is not None:
                continue
            if "esgd" in job.cfg:  # a population study (harness.esgd), not a run of a sweep
                raise ConfigError(ONE_STUDY_PER_COMMAND)
            run_job = Job.of(job.cfg, job.out_dir, job.choices)  # its problem, resolved once
            run_module.check(run_job)  # a bad value stops the sweep here: nothing is written
            jobs.append((job, result, run_job))
            # the checks are kept as they are found: a zoo's take minutes, and may be cut off
            if preflight.count() > kept and sweep_dir.is_dir():
                kept = preflight.count()
                preflight.save(sweep_dir / PLANNING_FILE)
        if jobs:
            self._train(jobs, sweep_dir)
        elif (sweep_dir / CHECKPOINTS_FOLDER).is_dir():  # left by a stop as its last runs ended
            from harness.training import checkpoint

            checkpoint.tidy(sweep_dir)
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        return returns

    def _train(self, jobs: list[Prepared], sweep_dir: Path) -> None:
        from harness.results import PLANNING_FILE, RunRecord
        from harness.sweeps.launcher import execute_jobs
        from harness.training import preflight

        assert self.config is not None and self.hydra_context is not None
        per_job = self._start_jobs(jobs, sweep_dir)
        callbacks = self.hydra_context.callbacks
        with env_override(dict(self.config.hydra.job.env_set)):
            records = execute_jobs(
                [run_job for _, _, run_job in jobs],
                workers=None if self.n_jobs < 1 else self.n_jobs,
                use_workers=self.use_workers,
                max_stack=self.max_stack,
                max_stack_s=self.max_stack_s,
                planned=lambda: preflight.save(sweep_dir / PLANNING_FILE),  # the stacking probes
                checkpoint_every_s=self.checkpoint_every_s,
            )
        for (job, result, _), record in zip(jobs, records, strict=True):
            result.return_value = RunRecord(record)
            if per_job:
                config = self._job_config(job.num, job.sweep_overrides, sweep_dir)
                callbacks.on_job_end(config=config, job_return=result)

    def _start_jobs(self, jobs: list[Prepared], sweep_dir: Path) -> bool:
        """Before the jobs train: their run folders with Hydra's files, the job log, the
        callbacks' on_job_start. Whether the callbacks want on_job_end per job."""
        assert self.config is not None and self.hydra_context is not None
        subdir = self.config.hydra.output_subdir  # null: no Hydra files, as Hydra does
        for job, _, _ in jobs:
            job.out_dir.mkdir(parents=True, exist_ok=True)
            if subdir is not None:
                (job.out_dir / subdir).mkdir(exist_ok=True)
                for name, text in job.files.items():
                    (job.out_dir / subdir / name).write_text(text, encoding="utf-8")
        self._configure_job_log(sweep_dir)
        callbacks = self.hydra_context.callbacks
        per_job = _defines_job_callbacks(callbacks.callbacks)
        for job, _, _ in jobs if per_job else ():
            config = self._job_config(job.num, job.sweep_overrides, sweep_dir)
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
