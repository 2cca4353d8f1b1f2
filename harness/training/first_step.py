"""The first-step check of an optimizer config, and its step's time alone.

Before anything trains or is written, a copy of the run's model is evaluated, takes one step on
the first mini-batch with the run's optimizer and is evaluated again: an optimizer that cannot
be built for the model or fails there (a third-party class that needs sparse gradients, 2-D
parameters only, a state key it never set) ends the command in one line. If it passes, the
copy's step is timed alone: a stack's members share its time, so this is each run's own cost
(an optimizer's step differs 100x across the catalogue). Both are measured once per optimizer
config (harness.training.preflight).
"""

from __future__ import annotations

import contextlib
import json
import statistics
import time
import warnings

import torch
from omegaconf import DictConfig, OmegaConf

from harness.config.class_paths import node_key, recorded_targets
from harness.errors import ConfigError, HarnessError
from harness.training import engine, memory, preflight
from harness.training.building import build_optimizer
from harness.training.job import Job
from harness.training.setup import Setup
from harness.training.stepping import failure_reason

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
    """The median of the timed steps' seconds: a step stalled once by another process on a
    shared machine counts once, not in a mean (one stall of ~2 s made Adamax's net1 step 94 ms
    in a mean of 20, against 0.5 ms when trained, and put it first among a zoo's costliest)."""
    for _ in range(WARMUP_STEPS):
        members.step(rows)
        if members.failures():
            return None
    seconds = []
    started = time.perf_counter()
    for taken in range(1, TIMED_STEPS + 1):
        tic = time.perf_counter()
        members.step(rows)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        now = time.perf_counter()
        seconds.append(now - tic)
        if members.failures():  # a step that failed is no step to time
            return None
        if taken >= MIN_TIMED_STEPS and now - started >= CALIBRATION_S:
            break
    return statistics.median(seconds)
