"""ESGD and the baselines of the paper's Table 1, from the same machinery, at equal compute.

Compute is counted in mini-batch steps x models (one forward and backward of one network on one
mini-batch); fitness and test evaluations are not counted. Every method gets mu * K * K_s:

* ``esgd``: mu individuals, K generations of an SGD phase (K_s steps each, back-off) and an
  evolution phase (with ``offspring_sgd_steps`` W > 0, every offspring takes W steps before it
  is evaluated, and every SGD phase is K_v * lambda * W / mu steps shorter to pay for them);
  each individual draws a new plan every generation (``plans=redraw``) or keeps the one it was
  first given, a child its first parent's (``plans=inherit``);
* ``esgd_no_evolution``: the same without the evolution phase (plans as ESGD's, back-off
  kept);
* ``population``: mu independent networks, each with one plan drawn once for its K * K_s steps
  (its schedule, like every schedule here, spans the whole run), no back-off, no evolution;
* ``single``: one network with the plan of the population baseline's best individual (and its
  initial weights), trained mu * K * K_s steps.

``anneal`` (1: off) multiplies every plan's rate in generation k by anneal^((k-1)/(K-1)): ESGD's
plans are drawn from rate ranges scaled so, an inherited plan is scaled so, and each baseline
individual's rate is scaled so during the k-th of its K stretches (optimizer state and schedule
position kept): equal compute and equal annealing.

For one seed every method starts from the same mu initial networks and sees the same sequence
of shared mini-batches (the single baseline continues it mu times longer). Each method records
one row per generation x individual (`Log`); a generation of a baseline is a checkpoint after the
same compute as an ESGD generation.
"""

from __future__ import annotations

import copy
import functools
import itertools
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from harness.esgd.operators import align, choose_parents, rank, recombine, select
from harness.esgd.pool import Plan, Pool
from harness.esgd.settings import Settings
from harness.esgd.trainer import UNUSED, Trainer
from harness.problems import Problem
from harness.stacking.mlp import StackedMLP
from harness.training.engine import batch_indices

log = logging.getLogger(__name__)
STREAMS = ("init", "order", "plans", "evolution")


def generators(seed: int) -> dict[str, torch.Generator]:
    """One independent torch.Generator per source of randomness, derived from the seed."""
    states = np.random.SeedSequence(seed).generate_state(len(STREAMS))
    return {
        name: torch.Generator().manual_seed(int(s)) for name, s in zip(STREAMS, states, strict=True)
    }


@dataclass
class Individual:
    uid: int  # unique within a run; kept by a survivor
    model: torch.nn.Module  # an MLP: the problem hand-stacks it
    fitness: float
    parents: tuple[int, ...] = ()  # an offspring's parents' uids
    born: int = 0  # the generation whose evolution phase made it


@dataclass
class Study:
    """What every method and seed of an ESGD study shares."""

    settings: Settings
    pool: Pool
    problem: Problem  # classification's: its MLPs are hand-stacked
    data: Any  # on the study's device; SGD on its training rows, fitness on its val split
    # initial weights drawn from the generator
    new_model: Callable[[torch.Generator], torch.nn.Module]
    batch_size: int

    def initial(self, generator: torch.Generator) -> list[Individual]:
        """The mu initial networks, as `settings.population_init` says, evaluated."""
        s = self.settings
        if s.population_init == "independent":
            models = [self.new_model(generator) for _ in range(s.population)]
        else:  # shared, or jitter: one draw, every individual a copy (plus noise)
            first = self.new_model(generator)
            models = [copy.deepcopy(first) for _ in range(s.population)]
            if s.population_init == "jitter":
                for model in models:
                    mutate(model, s.population_init_std, generator)
        fitness = self.evaluate(models)[0]
        return [Individual(k, m, f) for k, (m, f) in enumerate(zip(models, fitness, strict=True))]

    def batches(self, steps: int, generator: torch.Generator):
        device = self.problem.tensors(self.data)[0].device
        n = self.problem.size(self.data)
        return batch_indices(n, self.batch_size, steps, generator, device)

    def evaluate(self, models: Sequence[torch.nn.Module], test: bool = False):
        """(losses, errors) of `models` on the held-out fitness split (or the test set).
        Copies are stacked: a StackedMLP rebinds its models, which may be training in another."""
        stack = StackedMLP([copy.deepcopy(m) for m in models])
        metrics = self.problem.stacked_evaluate(stack, self.data, "test" if test else "val", None)
        return [m["loss"] for m in metrics], [1.0 - m["accuracy"] for m in metrics]


class Log:
    """The rows of one method and seed: one per generation x individual."""

    def __init__(self, study: Study, method: str, seed: int) -> None:
        self.study, self.method, self.seed = study, method, seed
        self.keys = sorted({k for e in study.pool.pool.values() for k in e.get("ranges") or {}})
        self.rows: list[dict] = []

    def generation(
        self,
        generation: int,
        candidates: Sequence[Individual],
        plans: dict[int, Plan],
        selected: Sequence[Individual],
        start: dict[int, float] | None = None,
        backoffs: dict[int, int] | None = None,
        used: dict[int, dict] | None = None,
    ) -> None:
        """Record `candidates` (trained by `plans`, by uid, and with what their optimizers used
        at the generation's first step, `used`; offspring at birth have neither) and which
        survive; evaluates them on the test set for the tables."""
        s = self.study.settings
        test_loss, test_error = self.study.evaluate([c.model for c in candidates], test=True)
        order = rank([c.fitness for c in candidates])
        place = {c.uid: order.index(i) + 1 for i, c in enumerate(candidates)}
        kept = {c.uid for c in selected}
        for c, loss, error in zip(candidates, test_loss, test_error, strict=True):
            plan = plans.get(c.uid)
            hyper = plan.hyperparameters if plan else {}
            self.rows.append(
                {
                    "method": self.method,
                    "seed": self.seed,
                    "generation": generation,
                    "model_steps": generation * s.population * s.sgd_steps,
                    "uid": c.uid,
                    "offspring": bool(c.parents) and c.born == generation,
                    "parents": "+".join(map(str, c.parents)),
                    "optimizer": plan.optimizer if plan else "",
                    "schedule": plan.schedule if plan else "",
                    "hyperparameters": plan.describe() if plan else "",
                    **{key: hyper.get(key, math.nan) for key in self.keys},
                    **(used or {}).get(c.uid, UNUSED),
                    "backoffs": (backoffs or {}).get(c.uid, 0),
                    "fitness_start": (start or {}).get(c.uid, math.nan),
                    "fitness": c.fitness,
                    "test_loss": loss,
                    "test_error": error,
                    "rank": place[c.uid],
                    "selected": c.uid in kept,
                }
            )
        best = min((c.fitness for c in selected), key=lambda f: (math.isnan(f), f))
        log.info(
            "%s seed %d generation %d: best fitness %.4f", self.method, self.seed, generation, best
        )


def mutate(model: torch.nn.Module, std: float, generator: torch.Generator) -> None:
    """Add N(0, std^2) noise to every weight of `model` (see operators.recombine)."""
    tensors = recombine([list(model.parameters())], std, generator)
    with torch.no_grad():
        for parameter, tensor in zip(model.parameters(), tensors, strict=True):
            parameter.copy_(tensor)


def sgd_phase(
    study: Study,
    population: list[Individual],
    plans: list[Plan],
    batches,
    generation: int,
    steps: int | None = None,
) -> tuple[dict[int, int], dict[int, dict]]:
    """Train every individual `steps` (default K_s) with its plan (its schedule at this
    generation's stretch of a run of K x `steps`); every `backoff_every` steps (and at the end),
    an individual whose fitness rose is restored to the previous check. Returns the back-offs
    and what each optimizer used at the first step (`Trainer.used`), by uid."""
    s = study.settings
    steps = steps or s.sgd_steps
    models = [i.model for i in population]
    start = (generation - 1) * steps
    trainer = Trainer(study, models, plans, s.generations * steps, batches, start)
    used = dict(zip((i.uid for i in population), trainer.used(), strict=True))
    backoffs = dict.fromkeys((i.uid for i in population), 0)
    for check in range(0, steps, s.backoff_every):
        snapshot = trainer.snapshot()
        trainer.train(min(s.backoff_every, steps - check))
        for k, (individual, fitness) in enumerate(zip(population, trainer.fitness(), strict=True)):
            if fitness <= individual.fitness:
                individual.fitness = fitness
            else:  # worse, or NaN
                trainer.restore(snapshot, k)
                backoffs[individual.uid] += 1
    return backoffs, used


def offspring(
    study: Study,
    population: list[Individual],
    born: int,
    uids,
    generator: torch.Generator,
    warm: Callable[[list[Individual]], None] | None = None,
) -> list[Individual]:
    """lambda offspring of `population` (see operators.recombine), trained by `warm` (the
    warm steps, if any), their fitness evaluated."""
    s = study.settings
    children = []
    for picked in choose_parents(len(population), s.offspring, s.parents, generator):
        parents = [population[i] for i in picked]
        tensors = [list(p.model.parameters()) for p in parents]
        if s.recombination == "aligned_mean":  # every parent's units matched to the first's
            tensors = tensors[:1] + [align(tensors[0], other) for other in tensors[1:]]
        tensors = recombine(tensors, s.mutation_std, generator)
        model = copy.deepcopy(parents[0].model)  # the architecture; its weights are replaced
        with torch.no_grad():
            for parameter, tensor in zip(model.parameters(), tensors, strict=True):
                parameter.copy_(tensor)
        lineage = tuple(p.uid for p in parents)
        children.append(Individual(next(uids), model, math.nan, lineage, born))
    if warm:
        warm(children)
    fitness = study.evaluate([c.model for c in children])[0]
    for child, value in zip(children, fitness, strict=True):
        child.fitness = value
    return children


def warm_up(
    study: Study,
    children: list[Individual],
    plans: dict[int, Plan],
    used: dict[int, dict],
    batches,
    steps: int,
    phase: int,
    generation: int,
) -> None:
    """Train `children` `steps` SGD steps each (together, on the run's shared mini-batches),
    each with its first parent's plan (by uid in `plans`, where the children's are added, and
    what their optimizers used in `used`) and fresh optimizer state, at the schedule's position
    where this generation's SGD phase of `phase` steps began."""
    if not steps:
        return
    inherited = [plans[c.parents[0]] for c in children]
    models = [c.model for c in children]
    s = study.settings
    start, span = (generation - 1) * phase, s.generations * phase
    trainer = Trainer(study, models, inherited, span, batches, start)
    used.update(zip((c.uid for c in children), trainer.used(), strict=True))
    trainer.train(steps)
    plans.update({c.uid: plan for c, plan in zip(children, inherited, strict=True)})


def esgd(study: Study, seed: int, evolve: bool = True) -> list[dict]:
    s, rng = study.settings, generators(seed)
    log = Log(study, "esgd" if evolve else "esgd_no_evolution", seed)
    population = study.initial(rng["init"])
    log.generation(0, population, {}, population)
    uids = itertools.count(len(population))
    warm_steps = s.offspring_sgd_steps if evolve else 0
    # the offspring's warm steps come out of the SGD phases (the budget stays mu x K x K_s);
    # they step on the same sequence of mini-batches
    phase = s.sgd_steps - s.evolution_steps * s.offspring * warm_steps // s.population
    per_generation = phase + s.evolution_steps * warm_steps
    batches = study.batches(s.generations * per_generation, rng["order"])
    # inherit: every individual keeps the plan it was first given (the initial population draws
    # theirs as the population baseline does), an offspring takes its first parent's
    # (redraw draws nothing here: its stream stays the committed studies')
    inherit = s.plans == "inherit"
    plan_of = {i.uid: study.pool.sample(rng["plans"]) for i in population} if inherit else {}
    for generation in range(1, s.generations + 1):
        if inherit:
            plans = [plan_of[i.uid] for i in population]
        else:
            plans = [study.pool.sample(rng["plans"]) for _ in population]
        plans = [plan.annealed(s.rate_scale(generation)) for plan in plans]
        start = {i.uid: i.fitness for i in population}
        backoffs, used = sgd_phase(study, population, plans, batches, generation, phase)
        trained = {i.uid: plan for i, plan in zip(population, plans, strict=True)}
        candidates = list(population)
        warm = functools.partial(
            warm_up,
            study,
            plans=trained,
            used=used,
            batches=batches,
            steps=warm_steps,
            phase=phase,
            generation=generation,
        )
        for _ in range(s.evolution_steps if evolve else 0):
            children = offspring(study, population, generation, uids, rng["evolution"], warm)
            if inherit:
                plan_of |= {c.uid: plan_of[c.parents[0]] for c in children}
            candidates += children
            everyone = population + children
            chosen = select([i.fitness for i in everyone], s.population, s.elite, rng["evolution"])
            population = [everyone[i] for i in chosen]
        log.generation(generation, candidates, trained, population, start, backoffs, used)
    return log.rows


def independent(
    study: Study, seed: int, method: str, uids: Sequence[int], plans: Sequence[Plan]
) -> list[dict]:
    """The baselines: individuals `uids` of the initial population, each trained alone with its
    one plan for its share of mu * K * K_s steps, recorded after every mu * K_s of them; in
    the k-th such stretch its rate is annealed as ESGD's in generation k."""
    s, rng = study.settings, generators(seed)
    log = Log(study, method, seed)
    initial = study.initial(rng["init"])  # the same networks ESGD starts from
    population = [initial[uid] for uid in uids]
    log.generation(0, population, {}, population)
    per_generation = s.population * s.sgd_steps // len(population)
    steps = s.generations * per_generation
    batches = study.batches(steps, rng["order"])
    models = [i.model for i in population]
    trainer = Trainer(study, models, plans, steps, batches)
    current = list(plans)
    for generation in range(1, s.generations + 1):
        stretch = [plan.annealed(s.rate_scale(generation)) for plan in plans]
        if stretch != current:  # annealing: the same optimizers go on at the new rate
            trainer.rebase(stretch, start=(generation - 1) * per_generation)
            current = stretch
        by_uid = {i.uid: plan for i, plan in zip(population, stretch, strict=True)}
        used = dict(zip((i.uid for i in population), trainer.used(), strict=True))
        start = {i.uid: i.fitness for i in population}
        trainer.train(per_generation)
        for individual, fitness in zip(population, trainer.fitness(), strict=True):
            individual.fitness = fitness
        log.generation(generation, population, by_uid, population, start, used=used)
    return log.rows


def run_seed(study: Study, seed: int) -> tuple[list[dict], dict[str, float]]:
    """Every method of `study.settings.methods` for one seed: rows, and wall time by method."""
    s = study.settings
    plan_rng = generators(seed)["plans"]
    plans = [study.pool.sample(plan_rng) for _ in range(s.population)]  # population baseline's
    rows, seconds = [], {}
    # the single baseline takes the population baseline's best plan: it runs after it
    for method in sorted(s.methods, key=lambda m: m == "single"):
        tic = time.perf_counter()
        if method == "population":
            new = independent(study, seed, method, range(s.population), plans)
        elif method == "single":
            final = [
                r for r in rows if r["method"] == "population" and r["generation"] == s.generations
            ]
            best = min(final, key=lambda r: (math.isnan(r["fitness"]), r["fitness"]))["uid"]
            new = independent(study, seed, method, [best], [plans[best]])
        else:
            new = esgd(study, seed, evolve=method == "esgd")
        rows += new
        seconds[method] = time.perf_counter() - tic
    return rows, seconds
