"""A population's SGD training on the stacked engine, with the snapshots a back-off restores."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from harness.esgd.data import Split
from harness.esgd.pool import Plan, Pool
from harness.models import MLP
from harness.stacked_model import StackedMLP
from harness.stacked_rules import StackedOptimizers, rule_key


@dataclass
class Snapshot:
    """Everything an individual's training depends on, for every individual of a trainer."""

    tensors: list[torch.Tensor]  # clones of the stacked weights and biases
    optimizers: list[dict]  # state_dict() copies: state (step counts included) and groups
    schedulers: list[dict]


class Trainer:
    """`models` trained together as one StackedMLP, model k with the optimizer and schedule of
    `plans[k]` (schedules span a run of `steps`, from step `start`), on mini-batches from
    `batches` that all models share.

    The models' parameters are views of the stack: training updates them in place."""

    def __init__(
        self,
        models: Sequence[MLP],
        plans: Sequence[Plan],
        pool: Pool,
        steps: int,
        split: Split,
        batches: Iterator[tuple[int, torch.Tensor]],
        start: int = 0,
    ) -> None:
        self.stack = StackedMLP(models)
        built = [pool.build(p, m, steps, start) for p, m in zip(plans, models, strict=True)]
        self.optimizers = [optimizer for optimizer, _ in built]
        self.schedulers = [scheduler for _, scheduler in built]
        self.stepper = StackedOptimizers(self.stack, self.optimizers)
        # A back-off rewinds one model: its state must be its own, not a slice of a shared rule.
        assert all(rule_key(o) is None for o in self.optimizers), "a pool optimizer shares state"
        self.split, self.batches = split, batches

    def train(self, steps: int) -> None:
        x, y = self.split.x_train, self.split.y_train
        for _ in range(steps):
            _, idx = next(self.batches)
            self.stack.train_step(x[idx], y[idx])
            self.stepper.step()
            for scheduler in self.schedulers:
                scheduler.step()

    def fitness(self) -> list[float]:
        return self.stack.evaluate(self.split.x_fit, self.split.y_fit)[0]

    @torch.no_grad()
    def snapshot(self) -> Snapshot:
        return Snapshot(
            [t.clone() for t in self.stack.weights + self.stack.biases],
            [copy.deepcopy(o.state_dict()) for o in self.optimizers],
            [copy.deepcopy(s.state_dict()) for s in self.schedulers],
        )

    @torch.no_grad()
    def restore(self, snapshot: Snapshot, k: int) -> None:
        """Back model k off to `snapshot`: weights, optimizer state and schedule, exactly."""
        for tensor, saved in zip(
            self.stack.weights + self.stack.biases, snapshot.tensors, strict=True
        ):
            tensor[k].copy_(saved[k])
        self.optimizers[k].load_state_dict(copy.deepcopy(snapshot.optimizers[k]))
        self.schedulers[k].load_state_dict(copy.deepcopy(snapshot.schedulers[k]))


def losses_and_errors(
    stack: StackedMLP, x: torch.Tensor, y: torch.Tensor
) -> tuple[list[float], list[float]]:
    losses, accuracies = stack.evaluate(x, y)
    return losses, [1.0 - a for a in accuracies]
