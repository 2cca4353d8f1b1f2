"""The single-run training engine: a plain, compact loop over pre-loaded tensors.

Data stays on the training device; each epoch draws a seeded permutation and mini-batches are
slices of it (no per-sample DataLoader in the hot loop). Mini-batch losses are buffered on the
device and read back every `log_every` steps, so the loop synchronises rarely.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from tqdm.auto import tqdm

from harness.stepping import evaluation_mode, needs_of, take_step

if TYPE_CHECKING:
    from harness.problems import Problem

EVAL_CHUNK = 10_000  # rows per forward pass during evaluation: bounds memory on any device


@dataclass(frozen=True)
class Schedule:
    """When things happen in a run (all counts in optimizer steps)."""

    batch_size: int
    iterations: int
    eval_every: int
    log_every: int
    # A run has diverged when its loss is NaN/inf or exceeds this factor times the initial
    # training loss (cross-entropy never overflows, it just explodes); None: NaN/inf only.
    divergence_factor: float | None = 10.0


@dataclass
class Recorder:
    """Long-format metrics: one (iteration, epoch, time_s, metric, value) row per measurement."""

    steps_per_epoch: int
    rows: list[tuple[int, float, float, str, float]] = field(default_factory=list)  # METRIC_COLUMNS

    def add(self, iteration: int, time_s: float, **metrics: float) -> None:
        epoch = iteration / self.steps_per_epoch
        self.rows += [(iteration, epoch, time_s, k, float(v)) for k, v in metrics.items()]


@dataclass
class Outcome:
    status: str  # "completed" or "diverged"
    recorder: Recorder
    diverged_at: int | None
    train_time_s: float  # optimisation only, evaluations excluded


def logged_hyperparameters(optimizer: torch.optim.Optimizer) -> dict[str, float]:
    """The hyper-parameters recorded at each log step, read from the first parameter group:
    `lr`, plus those an optimizer sets itself and declares in its class attribute
    `tuned_hyperparameters` (YellowFin: lr and momentum)."""
    names = dict.fromkeys(("lr", *getattr(optimizer, "tuned_hyperparameters", ())))
    return {name: float(optimizer.param_groups[0][name]) for name in names}


def divergence_limit(factor: float | None, initial_loss: float) -> float:
    """The loss above which a run counts as diverged (see Schedule.divergence_factor)."""
    return math.inf if factor is None else factor * initial_loss


def diverging(loss: float, limit: float) -> bool:
    return not math.isfinite(loss) or loss > limit


def batch_indices(
    n: int, batch_size: int, iterations: int, generator: torch.Generator, device: torch.device
) -> Iterator[tuple[int, torch.Tensor]]:
    """(iteration, row indices) of every step: each epoch is a fresh permutation drawn from
    `generator`, cut into batches (the last incomplete batch of an epoch is dropped)."""
    steps_per_epoch = n // batch_size
    perm = torch.empty(0, dtype=torch.int64)
    for it in range(1, iterations + 1):
        pos = (it - 1) % steps_per_epoch
        if pos == 0:
            perm = torch.randperm(n, generator=generator).to(device)
        yield it, perm[pos * batch_size : (pos + 1) * batch_size]


def train(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    problem: Problem,
    data: Any,
    eval_train_idx: torch.Tensor,
    schedule: Schedule,
    order_generator: torch.Generator,
    progress: bool = False,
    on_eval: Callable[[int, dict[str, float]], None] | None = None,
) -> Outcome:
    """Train `model` on `problem`'s `data` for `schedule.iterations` steps, evaluating every
    `schedule.eval_every` (the problem's metrics on the `eval_train_idx` rows of the training
    data and on each held-out split, recorded as train_<metric>, val_<metric>, test_<metric>).

    A diverging loss (see Schedule.divergence_factor) ends the run with status "diverged": a
    result, not an error.
    """
    device = eval_train_idx.device
    n, bs = problem.size(data), schedule.batch_size
    steps_per_epoch = n // bs  # the last incomplete batch of an epoch is dropped
    recorder = Recorder(steps_per_epoch)
    losses: torch.Tensor | None = None  # buffer of the last log_every losses, on the device
    train_time = 0.0
    bar = tqdm(total=schedule.iterations, disable=not progress, mininterval=1.0, unit="it")

    held_out = problem.held_out(data)
    needs = needs_of(optimizer)  # a closure, second-order backward, train/eval modes
    if needs.modes:
        optimizer.train()

    def run_evaluation(iteration: int) -> float:
        model.eval()
        with evaluation_mode(optimizer, needs):
            train = problem.evaluate(model, data, "train", eval_train_idx)
            metrics = {f"train_{k}": v for k, v in train.items()}
            for split in held_out:
                metrics |= {
                    f"{split}_{k}": v for k, v in problem.evaluate(model, data, split, None).items()
                }
        model.train()
        recorder.add(iteration, train_time, **metrics)
        if on_eval is not None:
            on_eval(iteration, metrics)
        return train["loss"]

    limit = divergence_limit(schedule.divergence_factor, run_evaluation(0))

    status, diverged_at = "completed", None
    tic = time.perf_counter()
    for it, idx in batch_indices(n, bs, schedule.iterations, order_generator, device):
        loss = take_step(optimizer, needs, lambda idx=idx: problem.loss(model, data, idx))
        if losses is None:
            losses = torch.zeros(schedule.log_every, device=loss.device, dtype=loss.dtype)
        scheduler.step()
        losses[(it - 1) % schedule.log_every] = loss

        # eval_every is a multiple of log_every (validated), so every evaluation is a log point.
        if it % schedule.log_every == 0 or it == schedule.iterations:
            k = (it - 1) % schedule.log_every + 1
            batch_loss = losses[:k].mean().item()  # synchronises the device: time is exact
            train_time += time.perf_counter() - tic
            recorder.add(it, train_time, batch_loss=batch_loss, **logged_hyperparameters(optimizer))
            bar.update(it - bar.n)
            bar.set_postfix(loss=f"{batch_loss:.4f}", refresh=False)
            failed = diverging(batch_loss, limit)
            if not failed and (it % schedule.eval_every == 0 or it == schedule.iterations):
                failed = diverging(run_evaluation(it), limit)
            if failed:
                status, diverged_at = "diverged", it
                break
            tic = time.perf_counter()
    bar.close()
    return Outcome(status, recorder, diverged_at, train_time)
