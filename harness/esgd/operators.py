"""The evolution phase's operators: making offspring, and m-elitist selection.

Lower fitness is better (it is a loss); NaN counts as the worst.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from scipy.optimize import linear_sum_assignment


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


@torch.no_grad()
def align(
    reference: Sequence[torch.Tensor], other: Sequence[torch.Tensor], rounds: int = 10
) -> list[torch.Tensor]:
    """`other`'s tensors (an MLP's weight and bias of every layer, in order) with the units of
    every hidden layer permuted to match `reference`'s: the same function, now comparable unit
    by unit (a mean of two unaligned networks mixes unrelated units).

    Weight matching: each hidden layer's permutation maximises the summed inner products of
    its units' incoming weights, biases and outgoing weights with the reference's (given the
    neighbouring layers' permutations; scipy's linear_sum_assignment), layer after layer,
    until no permutation changes or after `rounds` passes."""
    weights, biases = list(other[0::2]), list(other[1::2])
    ref_weights, ref_biases = reference[0::2], reference[1::2]
    hidden = len(weights) - 1
    perm = [torch.arange(len(b), device=b.device) for b in biases[:-1]]

    def at(layer: int) -> torch.Tensor | slice:  # inputs and outputs are never permuted
        return perm[layer] if 0 <= layer < hidden else slice(None)

    for _ in range(rounds):
        before = [p.clone() for p in perm]
        for layer in range(hidden):
            incoming = weights[layer][:, at(layer - 1)]
            outgoing = weights[layer + 1][at(layer + 1)]
            score = (
                ref_weights[layer] @ incoming.T
                + torch.outer(ref_biases[layer], biases[layer])
                + ref_weights[layer + 1].T @ outgoing
            )
            _, cols = linear_sum_assignment(score.double().cpu().numpy(), maximize=True)
            perm[layer] = torch.as_tensor(cols, device=score.device)
        if all(torch.equal(a, b) for a, b in zip(before, perm, strict=True)):
            break
    aligned = []
    for layer, (weight, bias) in enumerate(zip(weights, biases, strict=True)):
        aligned += [weight[at(layer)][:, at(layer - 1)], bias[at(layer)]]
    return aligned


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
