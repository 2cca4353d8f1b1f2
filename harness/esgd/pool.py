"""The optimizer pool: what an individual draws for an SGD phase, and how it is built."""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass

import torch
from omegaconf import DictConfig

from harness.errors import ConfigError
from harness.training.building import optimizer_and_schedule


def _readable(value: float) -> float:
    """`value` to 3 significant digits (readable tables)."""
    return float(f"{value:.3g}")


@dataclass(frozen=True)
class Plan:
    """What one individual trains with for one SGD phase (or a baseline for its whole run)."""

    optimizer: str  # a pool entry
    hyperparameters: dict[str, float]  # sampled values, passed to the optimizer class
    schedule: str  # a schedule entry, spanning the run (a phase takes its stretch)

    def describe(self) -> str:
        values = ", ".join(f"{k}={v:g}" for k, v in self.hyperparameters.items())
        return f"{self.optimizer} ({values}; {self.schedule})"

    def annealed(self, scale: float) -> Plan:
        """This plan with its rate (its drawn `lr`) times `scale`, to 3 significant digits; for a
        plan just drawn, that is a draw from its rate range scaled by `scale` (a log-uniform
        draw is scale-free). With `scale` 1, this plan itself."""
        if scale == 1:
            return self
        rate = _readable(self.hyperparameters["lr"] * scale)
        return dataclasses.replace(self, hyperparameters={**self.hyperparameters, "lr": rate})


def _uniform(generator: torch.Generator) -> float:
    return torch.rand(1, generator=generator, dtype=torch.float64).item()


def _choice(names: list[str], generator: torch.Generator) -> str:
    return names[min(int(_uniform(generator) * len(names)), len(names) - 1)]


class Pool:
    """Optimizers with hyper-parameter ranges, and learning-rate schedules, to draw plans from.

    A plan draws an optimizer and a schedule uniformly, and each hyper-parameter with a range
    log-uniformly in [low, high], rounded to 3 significant digits (readable tables).
    """

    def __init__(self, pool: DictConfig, schedules: DictConfig) -> None:
        self.pool, self.schedules = pool, schedules
        self.names, self.schedule_names = list(pool), list(schedules)

    def sample(self, generator: torch.Generator) -> Plan:
        name = _choice(self.names, generator)
        hyperparameters = {}
        for key, (low, high) in (self.pool[name].get("ranges") or {}).items():
            hyperparameters[key] = _readable(low * (high / low) ** _uniform(generator))
        return Plan(name, hyperparameters, _choice(self.schedule_names, generator))

    def build(self, plan: Plan, model: torch.nn.Module, steps: int, start: int = 0):
        """(optimizer, LR scheduler) of `plan` for `model`: the schedule spans a run of `steps`
        and is advanced to step `start` (an SGD phase takes its stretch of the run's schedule).

        The optimizer gets two parameter groups (weights, biases), so that the stacked engine
        steps it with its own step(): its whole state, step count included, is its own, which a
        back-off restores for one individual (`trainer.Trainer`)."""
        layers = list(model.layers)
        groups = [{"params": [m.weight for m in layers]}, {"params": [m.bias for m in layers]}]
        node, schedule = self.pool[plan.optimizer].optimizer, self.schedules[plan.schedule]
        try:
            optimizer, scheduler = optimizer_and_schedule(
                node, schedule, groups, steps, **plan.hyperparameters
            )
        except ConfigError as exc:
            raise ConfigError(f"esgd pool: {plan.describe()} cannot be built: {exc}") from None
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Detected call of")  # no optimizer step yet
            for _ in range(start):
                scheduler.step()
        return optimizer, scheduler

    def check(self, model: torch.nn.Module) -> None:
        """Build every optimizer at both ends of its ranges with every schedule: a bad pool fails
        before anything trains."""
        for name in self.names:
            ranges = self.pool[name].get("ranges") or {}
            for end in (0, 1):
                values = {key: float(bounds[end]) for key, bounds in ranges.items()}
                for schedule in self.schedule_names:
                    self.build(Plan(name, values, schedule), model, steps=1)
