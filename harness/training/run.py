"""One training run from a composed config: validate, build, train, write results."""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from harness.config.validate import DTYPES, validate_run
from harness.loggers import Stream, aborting, open_stream
from harness.results.recording import finish
from harness.training import engine
from harness.training.building import build_optimizer, optimizer_and_schedule
from harness.training.checkpoint import Checkpoint, task_checkpoint
from harness.training.first_step import first_step_check, step_time_alone
from harness.training.job import Job
from harness.training.setup import Setup, load_setup, run_seeds
from harness.training.stepping import own_step_path

log = logging.getLogger(__name__)


def show_progress(setting: Any) -> bool:
    return sys.stderr.isatty() if setting == "auto" else bool(setting)


@dataclass
class PreparedRun:
    """A validated run, built and ready to train: what any engine needs to train it and to write
    its results afterwards."""

    cfg: DictConfig
    choices: dict[str, str]
    out_dir: Path
    setup: Setup
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    order_seed: int
    device: torch.device
    started: float  # time.perf_counter() when preparation began
    step_time_alone_s: float | None = None  # its step's cost alone (first_step_check's timing)

    def order_generator(self) -> torch.Generator:
        """The generator of the run's data order (a fresh one, at the run's start)."""
        return torch.Generator().manual_seed(self.order_seed)


def prepare(job: Job) -> PreparedRun:
    """Validate the job's config, load its data and build its model, optimizer and schedule."""
    started = time.perf_counter()
    cfg = job.cfg
    validate_run(cfg, job.problem)
    device = job.device
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    dtype = DTYPES[cfg.train.dtype]
    setup = load_setup(job, device, dtype)
    init_seed, order_seed = run_seeds(cfg.seed)
    first_step_check(job, setup)
    torch.manual_seed(cfg.seed)  # anything else random (none in the built-in models)
    generator = torch.Generator().manual_seed(init_seed)
    model = setup.problem.build_model(cfg, setup.data, generator)
    optimizer, scheduler = build_optimizer(job, model, setup.schedule.iterations)
    return PreparedRun(
        cfg,
        dict(job.choices),
        job.out_dir,
        setup,
        model,
        optimizer,
        scheduler,
        order_seed,
        device,
        started,
        step_time_alone(job, setup),
    )


def check(job: Job) -> None:
    """Raise the HarnessError `prepare` would raise for the job, without building its model:
    what a launcher runs on every job of a sweep before it creates anything."""
    cfg = job.cfg
    validate_run(cfg, job.problem)
    job.device  # noqa: B018 - a device named where there is none fails here, in one line
    setup = load_setup(job, torch.device("cpu"), DTYPES[cfg.train.dtype])
    probe = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(1))])
    optimizer_and_schedule(  # every job's values, as the constructors check them
        cfg.optimizer, cfg.schedule, probe.parameters(), setup.schedule.iterations
    )
    first_step_check(job, setup)


def train_single(
    run: PreparedRun,
    progress: bool = False,
    checkpoint: Checkpoint | None = None,
    stream: Stream | None = None,
) -> engine.Outcome:
    """Train a prepared run by itself: the engine's loop over its one member (going on from
    `checkpoint`, and saving it, where one is given; its rows to `stream` as recorded)."""
    setup = run.setup
    members = engine.Alone(run.model, run.optimizer, run.scheduler, setup.problem, setup.data)
    if checkpoint is not None:
        checkpoint.layout = [f"{run.out_dir.name}: {own_step_path(run.optimizer)}"]
    (outcome,) = engine.train(
        members,
        setup.problem,
        setup.data,
        setup.eval_train_idx,
        setup.schedule,
        run.order_generator(),
        progress=progress,
        checkpoint=checkpoint,
        sinks=[stream],
    )
    return outcome


def execute(
    cfg: DictConfig, out_dir: Path, choices: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run one training job described by `cfg` with the single-run engine and write its results
    into `out_dir`. Returns the run.json record. `choices` names the config-group options the
    config was composed from (model, optimizer, ...): they identify the run in the tables."""
    return execute_job(Job.of(cfg, out_dir, choices))


def execute_job(job: Job, checkpoint_every_s: float | None = None) -> dict[str, Any]:
    """`execute` for a job whose problem is resolved; a sweep's job checkpoints its training
    every `checkpoint_every_s` seconds, and goes on from its checkpoint
    (harness.training.checkpoint)."""
    run = prepare(job)
    cfg, choices = job.cfg, job.choices
    log.info(
        "training %s with %s (lr=%s) for %d iterations on %s",
        choices.get("model"),
        choices.get("optimizer"),
        cfg.optimizer.get("lr"),
        run.setup.schedule.iterations,
        run.device,
    )
    checkpoint = task_checkpoint([job], False, checkpoint_every_s)
    stream = open_stream(run)
    with aborting([stream]):
        outcome = train_single(run, show_progress(cfg.train.progress), checkpoint, stream)
    record = finish(run, outcome, "single", own_step_path(run.optimizer), stream)
    if checkpoint is not None:
        checkpoint.remove()
    return record
