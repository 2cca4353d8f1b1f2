"""A population's SGD training: the engine's stacked members, with the snapshots a back-off
restores."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from harness.errors import HarnessError
from harness.esgd.pool import Plan
from harness.models import MLP
from harness.stacked import Stack
from harness.stacked_rules import rule_key

if TYPE_CHECKING:
    from harness.esgd.methods import Study


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
    model's loss on the validation split.

    The models' parameters are views of the stack: training updates them in place."""

    def __init__(
        self,
        study: Study,
        models: Sequence[MLP],
        plans: Sequence[Plan],
        steps: int,
        batches: Iterator[tuple[int, torch.Tensor]],
        start: int = 0,
    ) -> None:
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
