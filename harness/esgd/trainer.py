"""A population's SGD training: the engine's stacked members, with the snapshots a back-off
restores."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from harness.errors import HarnessError
from harness.esgd.pool import Plan
from harness.stacking.stack import Stack
from harness.stacking.update_rules import rule_key

if TYPE_CHECKING:
    from harness.esgd.methods import Study


# Where a parameter group holds its rate, and its schedule the base of that rate
RATE_KEYS = ("lr", "initial_lr")
# What `Trainer.used` records of an optimizer, for a row without one (an offspring at birth)
UNUSED = {"optimizer_class": "", "step_lr": math.nan, "step_momentum": math.nan, "nesterov": None}


@dataclass
class Snapshot:
    """Everything an individual's training depends on, for every individual of a trainer."""

    tensors: list[torch.Tensor]  # clones of the stacked parameters
    optimizers: list[dict]  # state_dict() copies: state (step counts included) and groups
    schedulers: list[dict]


class Trainer:
    """`models` trained together as one `Stack` (the engine's members), model k with the
    optimizer and schedule of `plans[k]` (schedules span a run of `steps`, from step `start`),
    on mini-batches from `batches` that all models share. SGD phases step it; fitness is each
    model's loss on the validation split; `rebase` gives the models plans with other rates
    mid-run (the baselines' annealing).

    The models' parameters are views of the stack: training updates them in place."""

    def __init__(
        self,
        study: Study,
        models: Sequence[torch.nn.Module],
        plans: Sequence[Plan],
        steps: int,
        batches: Iterator[tuple[int, torch.Tensor]],
        start: int = 0,
    ) -> None:
        self.pool, self.models, self.steps = study.pool, list(models), steps
        built = [study.pool.build(p, m, steps, start) for p, m in zip(plans, models, strict=True)]
        optimizers = [optimizer for optimizer, _ in built]
        # A back-off rewinds one model: its state must be its own, not a slice of a shared rule.
        assert all(rule_key(o) is None for o in optimizers), "a pool optimizer shares state"
        self.members = Stack(
            models, optimizers, [scheduler for _, scheduler in built], study.problem, study.data
        )
        self.batches = batches

    def train(self, steps: int) -> None:
        for _ in range(steps):
            _, rows = next(self.batches)
            self.members.step(rows)
            failed = self.members.failures()
            if failed:  # a population has no place for a dropped member
                raise HarnessError(f"ESGD: an optimizer of the pool failed: {failed}")

    def rebase(self, plans: Sequence[Plan], start: int) -> None:
        """Go on from step `start` with `plans`, each model's plan with another rate: its
        optimizer keeps its state (moments, step counts) and settings, its rate and schedule
        become those a fresh build of the new plan has at `start`, whatever the schedule."""
        for k, (plan, model) in enumerate(zip(plans, self.models, strict=True)):
            fresh, schedule = self.pool.build(plan, model, self.steps, start)
            own = self.members.optimizers[k].param_groups
            for group, new in zip(own, fresh.param_groups, strict=True):
                group.update({key: new[key] for key in RATE_KEYS})
            self.members.schedulers[k].load_state_dict(schedule.state_dict())

    def used(self) -> list[dict]:
        """What each model's next step uses, read from its optimizer (the first parameter
        group): its class, rate (its schedule's position included), momentum and Nesterov flag
        (NaN, None where the optimizer has none)."""
        used = []
        for optimizer in self.members.optimizers:
            group = optimizer.param_groups[0]
            used.append(
                {
                    "optimizer_class": type(optimizer).__name__,
                    "step_lr": float(group["lr"]),
                    "step_momentum": float(group.get("momentum", math.nan)),
                    "nesterov": group.get("nesterov"),
                }
            )
        return used

    def fitness(self) -> list[float]:
        return [metrics["val_loss"] for metrics in self.members.evaluate({"val": None})]

    def _tensors(self) -> list[torch.Tensor]:
        return [tensor for tensor, _ in self.members.stack.tensors()]

    @torch.no_grad()
    def snapshot(self) -> Snapshot:
        return Snapshot(
            [t.clone() for t in self._tensors()],
            [copy.deepcopy(o.state_dict()) for o in self.members.optimizers],
            [copy.deepcopy(s.state_dict()) for s in self.members.schedulers],
        )

    @torch.no_grad()
    def restore(self, snapshot: Snapshot, k: int) -> None:
        """Back model k off to `snapshot`: weights, optimizer state and schedule, exactly."""
        for tensor, saved in zip(self._tensors(), snapshot.tensors, strict=True):
            tensor[k].copy_(saved[k])
        self.members.optimizers[k].load_state_dict(copy.deepcopy(snapshot.optimizers[k]))
        self.members.schedulers[k].load_state_dict(copy.deepcopy(snapshot.schedulers[k]))
