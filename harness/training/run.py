"""One training run from a composed config: validate, build, train, write results."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import sys
import time
import warnings
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from omegaconf import DictConfig, OmegaConf

from harness.config.identity import config_hash
from harness.config.targets import node_key, recorded_targets
from harness.config.validate import DTYPES, validate_run
from harness.errors import ConfigError, HarnessError
from harness.problems import Problem
from harness.results import METRIC_COLUMNS, write_run
from harness.training import engine, memory, preflight
from harness.training.building import build_optimizer, optimizer_and_schedule
from harness.training.checkpoint import Checkpoint, task_checkpoint
from harness.training.datasets import data_on, iterations_of
from harness.training.job import Job
from harness.training.stepping import failure_reason, own_step_path

log = logging.getLogger(__name__)


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


def final_metrics(rows: list[tuple[int, float, float, str, float]], problem: Problem) -> dict:
    """Last evaluated values of every evaluation metric (train_*, val_*, test_*), and the best
    value of the problem's quality metric seen during the run on each held-out split
    (best_val_<quality>, best_test_<quality>), from a run's metric rows (iteration, epoch,
    time_s, metric, value)."""
    evaluations: dict[int, dict[str, float]] = {}
    for iteration, _, _, metric, value in rows:
        if metric.startswith(("train_", "val_", "test_")):
            evaluations.setdefault(iteration, {})[metric] = value
    last = max(evaluations)
    best = {}
    for split in ("val", "test"):
        quality = f"{split}_{problem.quality}"
        values = [v[quality] for v in evaluations.values() if quality in v]
        if values:
            best[f"best_{quality}"] = float(
                max(values) if problem.higher_is_better else min(values)
            )
    return {
        "iteration": int(last),
        **{metric: float(value) for metric, value in sorted(evaluations[last].items())},
        **best,
    }


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


# The calibration of a step alone: steps taken after the checked one, before timing (caches,
# lazy state); then steps timed until TIMED_STEPS are, or CALIBRATION_S has passed after at
# least MIN_TIMED_STEPS: a step of seconds (Kron's dense preconditioner on a 784-wide layer)
# is measured in a few, and a check costs a few of the run's own steps, not 20.
WARMUP_STEPS, TIMED_STEPS, MIN_TIMED_STEPS, CALIBRATION_S = 2, 20, 3, 1.0


def _first_step_key(job: Job, device: torch.device) -> tuple:
    """What a first-step check and its timing depend on: the optimizer's settings but its rates
    (a float changes neither whether it trains nor what its step costs), the schedule, model,
    data, batch size, dtype, device, the threads it is timed with and the problem. Not the run's
    length: a tuning study's short phase and its full-length phase share their checks."""
    cfg = job.cfg
    optimizer = recorded_targets(OmegaConf.to_container(cfg.optimizer, resolve=True))
    settings = {k: v for k, v in optimizer.items() if not isinstance(v, float)}
    return (
        json.dumps(settings, sort_keys=True, default=str),
        *(node_key(cfg[k]) for k in ("schedule", "model")),
        job.data_key,
        cfg.train.dtype,
        str(device),
        type(job.problem).__qualname__,
        cfg.train.batch_size,
        _timing_threads(cfg),
    )


def _timing_threads(cfg: DictConfig) -> int:
    """The threads a step is timed with: the config's, else one, as a sweep's workers train."""
    return cfg.threads or 1


def first_step_check(job: Job, setup: Setup) -> None:
    """Raise a one-line ConfigError if the job's optimizer cannot be built for its model or
    fails on its first step or evaluation (a third-party optimizer that needs sparse
    gradients, 2-D parameters only, a state key it never set, ...): a copy of the model is
    evaluated, takes one step on the first mini-batch and is evaluated again, before anything
    trains or is written. If it passes, the copy's step is timed alone (`step_time_alone`).
    The global random state is left as it was, so the run computes what it would without."""
    key = _first_step_key(job, setup.eval_train_idx.device)
    failure, _ = preflight.outcome("first_step", key, lambda: _first_steps(job, setup))
    if failure is not None:
        raise ConfigError(f"optimizer {job.cfg.optimizer.get('_target_')} {failure}")


def step_time_alone(job: Job, setup: Setup) -> float | None:
    """Seconds per optimizer step of the job's model and optimizer trained alone, measured by
    `first_step_check` (which `prepare` ran): a stack's members share its time, so this is
    each run's own cost (an optimizer's step differs 100x across the catalogue)."""
    found = preflight.known("first_step", _first_step_key(job, setup.eval_train_idx.device))
    return None if found is None else found[1]


def checked_step_time(job: Job) -> float | None:
    """The step time alone that `check` measured for the job (on the CPU, where it checks):
    what a launcher plans its stacks by. None if it was not checked in this process."""
    found = preflight.known("first_step", _first_step_key(job, torch.device("cpu")))
    return None if found is None else found[1]


def _first_steps(job: Job, setup: Setup) -> tuple[str | None, float | None]:
    problem, data = setup.problem, setup.data
    device = setup.eval_train_idx.device
    failed, seconds = None, None
    with (
        torch.random.fork_rng(devices=[device] if device.type == "cuda" else []),
        # a step that asks for more than the machine has: refused, not killed (on a GPU, an
        # allocation beyond its memory raises by itself; CUDA reserves address space freely)
        memory.bounded() if device.type == "cpu" else contextlib.nullcontext(),
    ):
        model = problem.build_model(job.cfg, data, torch.Generator().manual_seed(0))
        optimizer, scheduler = build_optimizer(job, model, setup.schedule.iterations)
        rows = torch.arange(min(setup.schedule.batch_size, problem.size(data)), device=device)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                # as the engine does: an evaluation before the first step, and one after it
                members = engine.Alone(model, optimizer, scheduler, problem, data)
                members.evaluate({"train": rows})
                members.step(rows)  # a failing step is told, not raised (a result in training)
                failed = members.failures().get(0)
                if failed is None:
                    members.evaluate({"train": rows})
                    seconds = _timed_steps(members, rows, device, _timing_threads(job.cfg))
        except HarnessError:
            raise
        except Exception as exc:  # the optimizer's own error, told in one line
            failed = failure_reason(exc)
    if failed is None:
        return None, seconds
    return f"fails on its first step or evaluation here ({failed[:200]})", None


def _timed_steps(
    members: engine.Alone, rows: torch.Tensor, device: torch.device, threads: int
) -> float | None:
    """Seconds per step of `members` (None if a step fails: training will tell), with
    `threads` CPU threads: the config's, else one, as stacks train in a sweep's workers. Two
    threads on a shared 2-core machine made a small step's time depend on the load (Adam on
    net1: 65 ms a step while another process ran, 0.54 ms with one thread), and a study
    compares the times of all its optimizers."""
    default_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _seconds_per_step(members, rows, device)
    finally:
        torch.set_num_threads(default_threads)


def _seconds_per_step(
    members: engine.Alone, rows: torch.Tensor, device: torch.device
) -> float | None:
    for _ in range(WARMUP_STEPS):
        members.step(rows)
        if members.failures():
            return None
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    tic = time.perf_counter()
    for taken in range(1, TIMED_STEPS + 1):
        members.step(rows)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        elapsed = time.perf_counter() - tic
        if members.failures():  # a step that failed is no step to time
            return None
        if taken >= MIN_TIMED_STEPS and elapsed >= CALIBRATION_S:
            break
    return elapsed / taken


def finish(
    run: PreparedRun, outcome: engine.Outcome, engine_name: str, update_path: str
) -> dict[str, Any]:
    """Write a trained run's results into its folder; returns the run.json record.
    `engine_name` (single or stacked) and `update_path` (how its optimizer updated it, see
    harness.stacking.stacked_optimizers) say what trained it."""
    metrics = pd.DataFrame(outcome.recorder.rows, columns=METRIC_COLUMNS)
    config = OmegaConf.to_container(run.cfg, resolve=True)
    iterations = run.setup.schedule.iterations
    problem = run.setup.problem
    record = {
        "status": outcome.status,
        "final": final_metrics(outcome.recorder.rows, problem),
        "problem": {
            "class": f"{type(problem).__module__}.{type(problem).__qualname__}",
            "quality": problem.quality,
            "higher_is_better": problem.higher_is_better,
        },
        "diverged_at": outcome.diverged_at,
        "error": outcome.error,
        "iterations": iterations,
        "epochs": iterations / outcome.recorder.steps_per_epoch,
        "seed": run.cfg.seed,
        "choices": run.choices,
        "config_hash": config_hash(config),
        "config": config,
        "engine": engine_name,
        "update_path": update_path,
        "cuda_graph": outcome.cuda_graph,  # a stack's on CUDA: whether a graph replayed its step
        "train_time_s": outcome.train_time_s,
        "resumed_at": list(outcome.resumed_at),
        "step_time_alone_s": run.step_time_alone_s,
        "wall_time_s": time.perf_counter() - run.started + outcome.earlier_wall_s,
        "device": str(run.device),
        "threads": torch.get_num_threads(),
        "host": socket.gethostname(),
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "versions": preflight.package_versions(),
    }
    write_run(run.out_dir, record, metrics)
    final = record["final"]
    log.info(
        "%s: test %s %.4f, test loss %.4f, train loss %.4f, %.1f s -> %s",
        outcome.status,
        problem.quality,
        final[f"test_{problem.quality}"],
        final["test_loss"],
        final["train_loss"],
        record["wall_time_s"],
        run.out_dir,
    )
    return record


def train_single(
    run: PreparedRun, progress: bool = False, checkpoint: Checkpoint | None = None
) -> engine.Outcome:
    """Train a prepared run by itself: the engine's loop over its one member (going on from
    `checkpoint`, and saving it, where one is given)."""
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
    outcome = train_single(run, show_progress(cfg.train.progress), checkpoint)
    record = finish(run, outcome, "single", own_step_path(run.optimizer))
    if checkpoint is not None:
        checkpoint.remove()
    return record
