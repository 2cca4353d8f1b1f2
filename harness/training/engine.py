"""The training loop: K members (models with their optimizers and schedules) trained on the same
mini-batches of pre-loaded tensors. One run is K = 1 (`Alone`); a stack of runs is K > 1
(harness.stacking.stack.Stack); an ESGD population steps a `Stack` between its back-offs.

Data stays on the training device; each epoch draws a seeded permutation and mini-batches are
slices of it (no per-sample DataLoader in the hot loop). Mini-batch losses are buffered on the
device and read back every `log_every` steps, so the loop synchronises rarely. Recording,
divergence, dropping a diverged member and timing live here, once.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from numbers import Real
from typing import TYPE_CHECKING, Any, Protocol

import torch
from tqdm.auto import tqdm

from harness.training.restoring import load_optimizer_state, rng_state, set_rng_state
from harness.training.stepping import (
    evaluation_mode,
    failure_reason,
    in_train_mode,
    needs_of,
    take_step,
)

if TYPE_CHECKING:
    from harness.problems import Problem
    from harness.training.checkpoint import Checkpoint


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
    # takes each new row as it is recorded: a run's stream to its tracking tools (harness.loggers)
    sink: Callable[[list[tuple[int, float, float, str, float]]], None] | None = None

    def add(self, iteration: int, time_s: float, **metrics: float) -> None:
        epoch = iteration / self.steps_per_epoch
        new = [(iteration, epoch, time_s, k, float(v)) for k, v in metrics.items()]
        self.rows += new
        if self.sink is not None:
            self.sink(new)


@dataclass
class Outcome:
    status: str  # "completed", "diverged" or "failed" (its optimizer's step raised)
    recorder: Recorder
    diverged_at: int | None  # the step at which it diverged or failed
    train_time_s: float  # optimisation only, evaluations excluded (a stack's: all its members')
    error: str | None = None  # why it failed, in one line
    update_path: str | None = None  # how a stack updated it (harness.stacking.member_optimizers)
    cuda_graph: str | None = None  # whether a CUDA graph replayed its step (stacked_graph)
    resumed_at: tuple[int, ...] = ()  # the steps from which it went on from a checkpoint
    earlier_wall_s: float = 0.0  # wall time of the sittings up to the checkpoint it went on from


def logged_hyperparameters(optimizer: torch.optim.Optimizer) -> dict[str, float]:
    """The hyper-parameters recorded at each log step, read from the first parameter group:
    `lr`, plus those an optimizer sets itself and declares in its class attribute
    `tuned_hyperparameters` (YellowFin: lr and momentum)."""
    names = dict.fromkeys(("lr", *getattr(optimizer, "tuned_hyperparameters", ())))
    group = optimizer.param_groups[0]
    # an optimizer that works out its own step size may hold no number under `lr`
    return {name: float(group[name]) for name in names if isinstance(group.get(name), Real)}


def divergence_limit(factor: float | None, initial_loss: float) -> float:
    """The loss above which a run counts as diverged (see Schedule.divergence_factor)."""
    return math.inf if factor is None else factor * initial_loss


def diverging(loss: float, limit: float) -> bool:
    return not math.isfinite(loss) or loss > limit


def batch_indices(
    n: int,
    batch_size: int,
    iterations: int,
    generator: torch.Generator,
    device: torch.device,
    after: int = 0,
) -> Iterator[tuple[int, torch.Tensor]]:
    """(iteration, row indices) of every step after step `after` (a resumed run's: the earlier
    epochs' permutations are drawn, not used): each epoch is a fresh permutation drawn from
    `generator`, cut into batches (the last incomplete batch of an epoch is dropped)."""
    steps_per_epoch = n // batch_size
    perm = torch.empty(0, dtype=torch.int64)
    for it in range(1, iterations + 1):
        pos = (it - 1) % steps_per_epoch
        if pos == 0:
            perm = torch.randperm(n, generator=generator)
            if it + steps_per_epoch > after:  # this epoch trains
                perm = perm.to(device)
        if it > after:
            yield it, perm[pos * batch_size : (pos + 1) * batch_size]


def member_batches(
    n: int,
    batch_size: int,
    iterations: int,
    generators: Sequence[torch.Generator],
    device: torch.device,
    after: int = 0,
) -> Iterator[tuple[int, torch.Tensor]]:
    """(iteration, rows) of every step after `after` for members that each follow their own
    data order (one generator per member: the seeds of one configuration in a stack): rows
    ``[K, batch]``, member k's row k as `batch_indices` draws it for that member alone."""
    orders = [batch_indices(n, batch_size, iterations, g, device, after) for g in generators]
    for steps in zip(*orders, strict=True):
        yield steps[0][0], torch.stack([rows for _, rows in steps])


class Members(Protocol):
    """K models, each with its optimizer and LR schedule, trained on shared mini-batches: what
    `train` drives. Member k keeps its position until `keep` drops others."""

    def __len__(self) -> int: ...

    def step(self, rows: torch.Tensor) -> torch.Tensor:
        """One optimisation step (and schedule step) of every member on the training rows
        `rows` (``[batch]``, shared, or ``[K, batch]``, one row per member); their K mini-batch
        losses before the step, on the device (no synchronisation)."""
        ...

    def evaluate(self, splits: dict[str, torch.Tensor | None]) -> list[dict[str, float]]:
        """The problem's metrics of each member, as <split>_<metric>, on each split of `splits`:
        "train" with the training rows to measure, a held-out split ("val", "test") with None;
        at the point each optimizer reports (one switch to its eval mode for all of them)."""
        ...

    def hyperparameters(self) -> list[dict[str, float]]:
        """What each member's optimizer records at a log step (`logged_hyperparameters`)."""
        ...

    def failures(self) -> dict[int, str]:
        """The members whose optimizer raised in the last `step` (position -> why, one line):
        a result of that optimizer, not an error of the harness; the loop drops them."""
        ...

    def keep(self, kept: Sequence[int]) -> None:
        """Go on with the members at positions `kept` only."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Everything the members carry from step to step (weights, optimizer and schedule
        states): what a checkpoint saves (harness.training.checkpoint)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from `state`, saved by members built alike (and kept alike)."""
        ...


class Alone:
    """One model with its optimizer and schedule: the K = 1 members of a run trained by itself,
    through the optimizer's own step() and whatever it needs of it (harness.training.stepping: a
    closure, second-order backward, train/eval modes)."""

    def __init__(self, model, optimizer, scheduler, problem: Problem, data: Any) -> None:
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.problem, self.data = problem, data
        self.needs = needs_of(optimizer)
        self.failed: dict[int, str] = {}
        in_train_mode(optimizer)

    def __len__(self) -> int:
        return 1

    def step(self, rows: torch.Tensor) -> torch.Tensor:
        model, data = self.model, self.data
        self.failed = {}
        try:
            loss = take_step(
                self.optimizer, self.needs, lambda: self.problem.loss(model, data, rows)
            )
        except Exception as exc:  # noqa: BLE001 - the optimizer's failure is the run's result
            self.failed = {0: failure_reason(exc)}
            return torch.full((1,), math.nan)
        self.scheduler.step()
        return loss.view(1)

    def failures(self) -> dict[int, str]:
        return self.failed

    def evaluate(self, splits: dict[str, torch.Tensor | None]) -> list[dict[str, float]]:
        metrics = {}
        self.model.eval()
        with evaluation_mode(self.optimizer, self.needs):  # Schedule-Free: its average, once
            for split, rows in splits.items():
                found = self.problem.evaluate(self.model, self.data, split, rows)
                metrics |= {f"{split}_{name}": value for name, value in found.items()}
        self.model.train()
        return [metrics]

    def hyperparameters(self) -> list[dict[str, float]]:
        return [logged_hyperparameters(self.optimizer)]

    def keep(self, kept: Sequence[int]) -> None:
        pass  # K = 1: the loop ends when its member is dropped

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        load_optimizer_state(self.optimizer, state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])


def train(
    members: Members,
    problem: Problem,
    data: Any,
    eval_train_idx: torch.Tensor,
    schedule: Schedule,
    order: torch.Generator | Sequence[torch.Generator],
    divergence_factors: Sequence[float | None] | None = None,
    progress: bool = False,
    checkpoint: Checkpoint | None = None,
    sinks: Sequence[Callable | None] | None = None,
) -> list[Outcome]:
    """Train `members` for `schedule.iterations` steps on mini-batches of `problem`'s `data`,
    evaluating every `schedule.eval_every` (their metrics on the `eval_train_idx` rows of the
    training data and on each held-out split, recorded as train_<metric>, val_<metric>,
    test_<metric>). One Outcome per member, in their order. `order` draws the data order: one
    generator, shared by every member, or one per member (each its own mini-batches).

    A member whose loss diverges (see Schedule.divergence_factor; `divergence_factors` gives
    each member its own) ends with status "diverged", a result, not an error, and is dropped:
    it neither slows down nor disturbs the others. So does a member whose optimizer raises
    during training (status "failed", with the reason in its Outcome's `error`).

    With a `checkpoint`, the loop saves its whole state whenever one is due (at a log point,
    where no loss is buffered) and, if one was saved, goes on from it: the members must be
    built as they were (their states are loaded), `order` must be fresh generators.

    `sinks` (one per member, or None) take each member's metric rows as they are recorded
    (`Recorder.sink`); a member going on from a checkpoint hands its restored rows over first.
    """
    k, log_every = len(members), schedule.log_every
    n, held_out = problem.size(data), problem.held_out(data)
    factors = divergence_factors or [schedule.divergence_factor] * k
    steps_per_epoch = n // schedule.batch_size  # the last incomplete batch is dropped
    recorders = [Recorder(steps_per_epoch, sink=sink) for sink in sinks or [None] * k]
    status, diverged_at = ["completed"] * k, [None] * k
    errors: list[str | None] = [None] * k
    active = list(range(k))  # member of each position still training
    losses: torch.Tensor | None = None  # the last log_every losses of each position, on the device
    train_time = 0.0
    resumed_at: tuple[int, ...] = ()
    earlier_wall_s = 0.0

    def evaluation(iteration: int) -> list[float]:
        """Record every active member's metrics; their training losses."""
        found = members.evaluate({"train": eval_train_idx} | dict.fromkeys(held_out))
        for j, i in enumerate(active):
            recorders[i].add(iteration, train_time, **found[j])
        return [metrics["train_loss"] for metrics in found]

    def drop(ended: dict[int, str | None], outcome: str, iteration: int) -> None:
        """End the members at positions `ended` (-> their error, if any) with `outcome`; the
        others' buffered losses of this log window stay."""
        nonlocal active, losses
        kept = [j for j in range(len(active)) if j not in ended]
        for j, error in ended.items():
            status[active[j]], diverged_at[active[j]] = outcome, iteration
            errors[active[j]] = error
        active = [active[j] for j in kept]
        if active:
            members.keep(kept)
            losses = None if losses is None else losses[kept]

    def drop_diverging(values: list[float], iteration: int) -> None:
        ended = [j for j, i in enumerate(active) if diverging(values[j], limits[i])]
        if ended:
            drop(dict.fromkeys(ended), "diverged", iteration)

    def state(iteration: int) -> dict[str, Any]:
        """What the loop carries at a log point, for a checkpoint."""
        return {
            "iteration": iteration,
            "rows": [r.rows for r in recorders],
            "status": status,
            "diverged_at": diverged_at,
            "errors": errors,
            "active": active,
            "limits": limits,
            "train_time": train_time,
            "resumed_at": resumed_at,
            "members": members.state_dict(),
            "random": rng_state(),
        }

    saved = checkpoint.load() if checkpoint is not None else None
    if saved is None:
        start = 0
        limits = [divergence_limit(f, v) for f, v in zip(factors, evaluation(0), strict=True)]
    else:
        start, active, limits = saved["iteration"], saved["active"], saved["limits"]
        status, diverged_at, errors = saved["status"], saved["diverged_at"], saved["errors"]
        train_time, resumed_at = saved["train_time"], (*saved["resumed_at"], start)
        for recorder, rows in zip(recorders, saved["rows"], strict=True):
            recorder.rows = rows
            if recorder.sink is not None:  # what was recorded but never sent goes now
                recorder.sink(rows)
        if len(active) < k:
            members.keep(active)
        members.load_state_dict(saved["members"])
        set_rng_state(saved["random"])
        earlier_wall_s = checkpoint.earlier_wall_s
    bar = tqdm(
        initial=start, total=schedule.iterations, disable=not progress, mininterval=1.0, unit="it"
    )
    device = eval_train_idx.device
    if isinstance(order, torch.Generator):
        batches = batch_indices(n, schedule.batch_size, schedule.iterations, order, device, start)
    else:  # the rows of every member drawn, the active members' taken
        batches = member_batches(n, schedule.batch_size, schedule.iterations, order, device, start)
    taken: torch.Tensor | None = None  # `active` on the device: indexing with a list copies it
    tic = time.perf_counter()
    for it, idx in batches:
        if idx.dim() == 2 and len(active) < k:  # the rows of the members still training
            if taken is None or len(taken) != len(active):
                taken = torch.tensor(active, device=device)
            idx = idx[taken]
        loss = members.step(idx)
        if losses is None:
            losses = loss.new_zeros(len(active), log_every)
        losses[:, (it - 1) % log_every] = loss
        failed = members.failures()
        if failed:
            drop(dict(failed), "failed", it)
            if not active:
                break

        # eval_every is a multiple of log_every (validated), so every evaluation is a log point.
        if it % log_every == 0 or it == schedule.iterations:
            pending = (it - 1) % log_every + 1
            batch_loss = losses[:, :pending].mean(dim=1).tolist()  # synchronises: time is exact
            train_time += time.perf_counter() - tic
            for j, values in enumerate(members.hyperparameters()):
                recorders[active[j]].add(it, train_time, batch_loss=batch_loss[j], **values)
            bar.update(it - bar.n)
            bar.set_postfix(loss=f"{min(batch_loss):.4f}", refresh=False)
            drop_diverging(batch_loss, it)
            if active and (it % schedule.eval_every == 0 or it == schedule.iterations):
                drop_diverging(evaluation(it), it)
            if not active:
                break
            if checkpoint is not None and checkpoint.due() and it < schedule.iterations:
                checkpoint.save(state(it))
            tic = time.perf_counter()
    bar.close()
    return [
        Outcome(s, r, d, train_time, e, resumed_at=resumed_at, earlier_wall_s=earlier_wall_s)
        for s, r, d, e in zip(status, recorders, diverged_at, errors, strict=True)
    ]
