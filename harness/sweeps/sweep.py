"""A sweep's life, top to bottom: compose → resume → check → plan → train → consolidate.

1. **compose** (`compose.SweepComposer`, `prepare`): each job's config as Hydra composes it
   (Hydra's composition, once per set of config-group choices), resolved, with Hydra's files;
2. **resume** (`resume.resumed`): a job whose config already finished in the sweep folder (or
   in a study `sweep.reuse` names) is not trained again;
3. **check** (`training.run.check`): every other job is checked before anything is
   written: a bad value in any job stops the sweep with one line. Each optimizer's first step is
   checked and timed, and how it stacks and restores is probed, once per sweep; the outcomes are
   kept in the folder (`planning.json`) for its resumes;
4. **plan** (`plan`): which engine trains each job, grouped into tasks (stacks, or runs alone),
   in this process or over worker processes;
5. **train** (`execute.execute_jobs`): the tasks, each run writing its folder;
6. **consolidate** (`consolidate`, from the sweep's Hydra callback `callback.SweepCallback`,
   once every job has returned): the folder's finished runs into its tables.

The Hydra launchers (hydra_plugins/harness_launcher: `stacked` here, `slurm` through submitit)
are thin adapters around steps 1–5: Hydra only loads launchers from `hydra_plugins`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from harness.sweeps.compose import SweepComposer

if TYPE_CHECKING:  # imported where jobs train: it imports torch
    from harness.results import RunRecord
    from harness.training.job import Job

log = logging.getLogger(__name__)


@dataclass
class SweepJob:
    """One job of a sweep, composed: what Hydra and the harness need of it."""

    num: int  # Hydra's job number
    sweep_overrides: list[str]  # as the sweeper gave them
    overrides: list[str]  # the job's (non-Hydra) overrides
    resolved: dict[str, Any]  # its config, resolved: training no longer needs Hydra's runtime
    cfg: DictConfig  # the same, as a config
    out_dir: Path
    choices: dict[str, str]
    files: dict[str, str]  # Hydra's files in <out_dir>/.hydra: name -> YAML
    finished: RunRecord | None = None  # its record, where it finished already (resumed)
    run_job: Job | None = None  # the harness job that trains it (its problem resolved)


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


def job_config(
    composer: SweepComposer, num: int, overrides: Sequence[str], sweep_dir: Path
) -> DictConfig:
    """Job `num`'s config as Hydra's run_job sets it (the composer's working copy)."""
    config = composer.compose(overrides)
    with read_write(config.hydra), open_dict(config.hydra):
        config.hydra.job.id = config.hydra.job.num = num
        out_dir = sweep_dir / str(OmegaConf.select(config, "hydra.sweep.subdir"))
        config.hydra.runtime.output_dir = os.path.abspath(out_dir)
    return config


def compose_job(
    composer: SweepComposer, num: int, overrides: Sequence[str], sweep_dir: Path
) -> SweepJob:
    """1. Job `num`, composed and resolved, without writing anything."""
    config = job_config(composer, num, overrides, sweep_dir)
    written = OmegaConf.to_container(config, enum_to_str=True)
    hydra = written.pop("hydra")
    task_yaml = _yaml(written)
    if "${hydra:" in task_yaml:  # the `hydra` resolver reads Hydra's global job config
        HydraConfig.instance().set_config(config)
    task_overrides = list(config.hydra.overrides.task)
    resolved = _resolved_task(config)
    return SweepJob(
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


def prepare(
    composer: SweepComposer,
    job_overrides: Sequence[Sequence[str]],
    first_num: int,
    sweep_dir: Path,
    announce: Callable[[int, Sequence[str]], None] = lambda num, overrides: None,
) -> list[SweepJob]:
    """Steps 1–3 for every job of the sweep: composed, resumed (`finished` set) or checked
    (`run_job` set). A bad value in any job raises before anything is written."""
    from harness.config.validate import ONE_STUDY_PER_COMMAND
    from harness.errors import ConfigError
    from harness.results import PLANNING_FILE
    from harness.sweeps.resume import resumed
    from harness.training import preflight  # torch is imported only when jobs train
    from harness.training import run as run_module
    from harness.training.job import Job

    jobs: list[SweepJob] = []
    kept = preflight.load(sweep_dir / PLANNING_FILE)
    for num, overrides in enumerate(job_overrides, first_num):
        announce(num, overrides)
        job = compose_job(composer, num, overrides, sweep_dir)
        jobs.append(job)
        # 2. a finished run's record, also for a sweeper that reads the results (Optuna):
        # resumed trials tell it what they told it the first time
        job.finished = resumed(job.resolved, sweep_dir, job.out_dir, job.choices)
        if job.finished is not None:
            continue
        if "esgd" in job.cfg:  # a population study (harness.esgd), not a run of a sweep
            raise ConfigError(ONE_STUDY_PER_COMMAND)
        # 3. a bad value stops the sweep here: nothing is written
        job.run_job = Job.of(job.cfg, job.out_dir, job.choices)  # its problem, resolved once
        run_module.check(job.run_job)
        # the checks are kept as they are found: a zoo's take minutes, and may be cut off
        if preflight.count() > kept and sweep_dir.is_dir():
            kept = preflight.count()
            preflight.save(sweep_dir / PLANNING_FILE)
    return jobs


def make_run_folders(jobs: Sequence[SweepJob], output_subdir: str | None) -> None:
    """The run folders of the jobs about to train, with Hydra's files (`output_subdir` null:
    none, as Hydra does)."""
    for job in jobs:
        job.out_dir.mkdir(parents=True, exist_ok=True)
        if output_subdir is not None:
            (job.out_dir / output_subdir).mkdir(exist_ok=True)
            for name, text in job.files.items():
                (job.out_dir / output_subdir / name).write_text(text, encoding="utf-8")


def train(
    jobs: Sequence[SweepJob],
    sweep_dir: Path,
    workers: int | None,
    use_workers: bool | None,
    max_stack: int | None,
    max_stack_s: float | None,
    checkpoint_every_s: float | None,
) -> list[dict[str, Any]]:
    """Steps 4–5 on this machine: the jobs planned into tasks and trained; their records."""
    from harness.results import PLANNING_FILE
    from harness.sweeps.execute import execute_jobs
    from harness.training import preflight

    return execute_jobs(
        [job.run_job for job in jobs],
        workers=workers,
        use_workers=use_workers,
        max_stack=max_stack,
        max_stack_s=max_stack_s,
        planned=lambda: preflight.save(sweep_dir / PLANNING_FILE),  # the stacking probes
        checkpoint_every_s=checkpoint_every_s,
    )


def nothing_to_train(sweep_dir: Path) -> None:
    """Every job had finished: tidy the checkpoints a stop left as its last runs ended."""
    from harness.results import CHECKPOINTS_FOLDER

    if (sweep_dir / CHECKPOINTS_FOLDER).is_dir():
        from harness.training import checkpoint

        checkpoint.tidy(sweep_dir)
