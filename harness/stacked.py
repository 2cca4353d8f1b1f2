"""The stacked engine: the runs of a sweep that differ only in their optimizer, hyper-parameters
and schedule are trained together as one stacked model.

Runs that share architecture, batch size, data, seed (hence data order) and length (see
`group_key`) see the very same mini-batches, so their K networks are held as one `StackedMLP`
(harness.stacked_model) and trained with one pass over each batch. Each model keeps its own
``nn.Module``, optimizer and LR scheduler exactly as `run.prepare` built them (so initialisation
is the single-run engine's by construction); `StackedOptimizers` (harness.stacked_rules) steps
them. A model whose loss diverges is recorded as diverged and removed from the stack (the stack
is rebuilt without it), so it neither slows down nor disturbs the others.

Each model writes the same metrics and run.json as `run.execute` (through `run.finish`); its
``time_s`` is the stack's optimisation time. harness.launcher decides which runs stack and
where they train.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from harness import run as run_module
from harness.engine import (
    Outcome,
    Recorder,
    batch_indices,
    divergence_limit,
    diverging,
    logged_hyperparameters,
)
from harness.errors import HarnessError
from harness.models import resolve_activations
from harness.problems import problem_of
from harness.stacked_model import MLP_TARGET, StackedMLP
from harness.stacked_rules import StackedOptimizers, rule_key, stacking_refusal, update_path
from harness.validate import DTYPES, validate_run

log = logging.getLogger(__name__)

Job = tuple[DictConfig, Path, dict[str, str]]


def refusal(cfg: DictConfig) -> str | None:
    """Why the run of `cfg` cannot join a stack (None: it can). Only harness.models.MLP stacks;
    torch.optim's classes update their parameters in place, any other optimizer class must pass
    `stacking_refusal`'s probe (StackedOptimizers checks the views after every step as well)."""
    problem = problem_of(cfg)
    if not problem.stackable:
        return f"its problem {type(problem).__name__} does not stack"
    target = cfg.model.get("_target_")
    if target != MLP_TARGET:
        return f"its model {target} is not {MLP_TARGET}, the one model class that stacks"
    if cfg.optimizer._target_.startswith("torch.optim."):
        return None
    reason = _probe(OmegaConf.to_yaml(cfg.optimizer, resolve=True), cfg.train.dtype)
    return None if reason is None else f"optimizer {cfg.optimizer._target_}: {reason}"


@functools.lru_cache(maxsize=256)
def _probe(optimizer_yaml: str, dtype: str) -> str | None:
    return stacking_refusal(run_module.build(OmegaConf.create(optimizer_yaml)), DTYPES[dtype])


def group_key(cfg: DictConfig) -> tuple | None:
    """Key under which runs may be stacked (`stack_key`); None if this run cannot be stacked (see
    `refusal`), or if its config does not validate (the single-run engine then reports the
    error)."""
    try:
        validate_run(cfg)
        return None if refusal(cfg) is not None else stack_key(cfg)
    except HarnessError:
        return None


def stack_key(cfg: DictConfig) -> tuple:
    """The group of a valid run that can stack: model architecture, batch size, data config, seed
    (data order), length, evaluation and logging settings, dtype and device.

    Optimizer, hyper-parameters, schedule, divergence_factor and the initialisation scheme may
    differ inside a group (each model is built by run.prepare with its own settings); execution
    settings (threads, progress, train.engine) are ignored: the launcher decides on those.
    """
    model, train = cfg.model, cfg.train
    hidden = tuple(int(h) for h in model.hidden)
    return (
        MLP_TARGET,
        hidden,
        tuple(resolve_activations(hidden, model.activations)),
        train.batch_size,
        train.iterations,
        train.epochs,
        train.eval_every,
        train.eval_train_size,
        train.log_every,
        train.dtype,
        cfg.seed,
        str(run_module.resolve_device(cfg.device)),
        run_module.data_key(cfg),
    )


def train_stack(runs: Sequence[run_module.PreparedRun], progress: bool = False) -> list[Outcome]:
    """Train prepared runs of one group (see `group_key`) together; one Outcome per run, as
    engine.train would return it for that run alone."""
    setup = runs[0].setup
    data, schedule = setup.data, setup.schedule
    x, y = data.x_train, data.y_train
    x_eval, y_eval = x[setup.eval_train_idx], y[setup.eval_train_idx]
    n, bs, log_every = len(y), schedule.batch_size, schedule.log_every
    steps_per_epoch = n // bs
    recorders = [Recorder(steps_per_epoch) for _ in runs]
    status: list[str] = ["completed"] * len(runs)
    diverged_at: list[int | None] = [None] * len(runs)
    # runs still training, in stack order: models that share an update rule are neighbours
    active = sorted(range(len(runs)), key=lambda i: repr(rule_key(runs[i].optimizer)))
    stack = StackedMLP([runs[i].model for i in active])
    optimizers = StackedOptimizers(stack, [runs[i].optimizer for i in active])
    losses = torch.zeros(len(runs), log_every, device=x.device, dtype=x.dtype)
    train_time = 0.0
    bar = tqdm(total=schedule.iterations, disable=not progress, mininterval=1.0, unit="it")

    held_out = setup.problem.held_out(data)

    def run_evaluation(iteration: int) -> list[float]:
        splits = {"train": stack.evaluate(x_eval, y_eval)}
        splits |= {split: stack.evaluate(*data.split(split)) for split in held_out}
        for j, i in enumerate(active):
            metrics = {}
            for split, (loss, accuracy) in splits.items():
                metrics |= {f"{split}_loss": loss[j], f"{split}_accuracy": accuracy[j]}
            recorders[i].add(iteration, train_time, **metrics)
        return splits["train"][0]

    def drop(failed: list[int], iteration: int) -> None:
        nonlocal active, losses
        if not failed:
            return
        for j in failed:
            status[active[j]], diverged_at[active[j]] = "diverged", iteration
        kept = [j for j in range(len(active)) if j not in failed]
        active = [active[j] for j in kept]
        if active:
            stack.restack([runs[i].model for i in active])
            optimizers.keep(kept)
            losses = torch.zeros(len(active), log_every, device=x.device, dtype=x.dtype)

    initial = run_evaluation(0)
    limits = [
        divergence_limit(r.setup.schedule.divergence_factor, v)
        for r, v in zip(runs, initial, strict=True)
    ]
    batches = batch_indices(n, bs, schedule.iterations, runs[0].order_generator(), x.device)
    tic = time.perf_counter()
    for it, idx in batches:
        losses[:, (it - 1) % log_every] = stack.train_step(x[idx], y[idx])
        optimizers.step()
        with warnings.catch_warnings():
            # optimizers updated by a stacked rule never call their own step()
            warnings.filterwarnings("ignore", "Detected call of")
            for i in active:
                runs[i].scheduler.step()

        if it % log_every == 0 or it == schedule.iterations:
            k = (it - 1) % log_every + 1
            batch_loss = losses[:, :k].mean(dim=1).tolist()  # synchronises: time is exact
            train_time += time.perf_counter() - tic
            for j, i in enumerate(active):
                hyperparameters = logged_hyperparameters(runs[i].optimizer)
                recorders[i].add(it, train_time, batch_loss=batch_loss[j], **hyperparameters)
            bar.update(it - bar.n)
            drop([j for j, i in enumerate(active) if diverging(batch_loss[j], limits[i])], it)
            if active and (it % schedule.eval_every == 0 or it == schedule.iterations):
                train_loss = run_evaluation(it)
                drop([j for j, i in enumerate(active) if diverging(train_loss[j], limits[i])], it)
            if not active:
                break
            tic = time.perf_counter()
    bar.close()
    return [
        Outcome(s, r, d, train_time) for s, r, d in zip(status, recorders, diverged_at, strict=True)
    ]


def execute_group(jobs: Sequence[Job], threads: int | None = None) -> list[dict[str, Any]]:
    """Train the jobs (cfg, out_dir, choices), all with the same `group_key`, together as one
    stack; write each job's results as run.execute does; return their run.json records in order.

    Every job is validated and built (run.prepare) before anything trains, so a job with a bad
    config raises the HarnessError run.execute would raise, and nothing is written. `threads`
    overrides the configs' torch thread count (the launcher's workers use 1).
    """
    runs: list[run_module.PreparedRun] = []
    for cfg, out_dir, choices in jobs:
        prepared = run_module.prepare(cfg, Path(out_dir), choices)
        if runs:  # one copy of the data for the whole stack
            prepared.setup = dataclasses.replace(prepared.setup, data=runs[0].setup.data)
        runs.append(prepared)
    if len({stack_key(r.cfg) for r in runs}) != 1:  # prepare validated them
        raise ValueError("execute_group() needs jobs that share one stack_key")
    if threads is not None:
        torch.set_num_threads(threads)
    cfg = runs[0].cfg
    log.info(
        "training %d %s models stacked for %d iterations on %s",
        len(runs),
        runs[0].choices.get("model"),
        runs[0].setup.schedule.iterations,
        runs[0].device,
    )
    paths = [update_path(r.optimizer) for r in runs]  # before the stack sets fused=True
    outcomes = train_stack(runs, progress=run_module.show_progress(cfg.train.progress))
    return [
        run_module.finish(r, o, "stacked", path)
        for r, o, path in zip(runs, outcomes, paths, strict=True)
    ]
