"""The evolution phase's operators: making offspring, and m-elitist selection.

Lower fitness is better (it is a loss); NaN counts as the worst.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch


def rank(fitness: Sequence[float]) -> list[int]:
    """Indices from the fittest to the least fit (NaN last, ties in index order)."""
    return sorted(range(len(fitness)), key=lambda i: (_worst_if_nan(fitness[i]), i))


def _worst_if_nan(value: float) -> float:
    return math.inf if math.isnan(value) else value


def choose_parents(
    population: int, offspring: int, parents: int, generator: torch.Generator
) -> list[list[int]]:
    """For each of `offspring` children, `parents` distinct parents (indices into the
    population) drawn uniformly at random."""
    return [
        torch.randperm(population, generator=generator)[:parents].tolist() for _ in range(offspring)
    ]


@torch.no_grad()
def recombine(
    parents: Sequence[Sequence[torch.Tensor]], std: float, generator: torch.Generator
) -> list[torch.Tensor]:
    """Intermediate recombination and Gaussian mutation: the child's tensor i is the mean of
    the parents' tensors i plus independent N(0, std^2) noise on every entry.

    `parents` holds each parent's tensors in one order (weight and bias of every layer). The
    noise is drawn on the CPU from `generator`, so a child does not depend on the device; one
    parent and std 0 give an exact copy."""
    child = []
    for tensors in zip(*parents, strict=True):
        mean = torch.stack(tensors).mean(dim=0)
        if std > 0:
            noise = torch.randn(mean.shape, generator=generator, dtype=mean.dtype)
            mean.add_(noise.to(mean.device), alpha=std)
        child.append(mean)
    return child


def select(
    fitness: Sequence[float], survivors: int, elite: int, generator: torch.Generator
) -> list[int]:
    """m-elitist selection: the indices of the `elite` fittest candidates, then of
    `survivors - elite` candidates drawn uniformly without replacement from the others.

    The fittest candidate always survives, so the best fitness never degrades."""
    order = rank(fitness)
    rest = order[elite:]
    drawn = torch.randperm(len(rest), generator=generator)[: survivors - elite].tolist()
    return order[:elite] + [rest[i] for i in sorted(drawn)]
