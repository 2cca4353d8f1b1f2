"""ESGD (harness.esgd): elitism, back-off, the operators, the fitness split, reproducibility and
bad settings, on tiny populations and a subset of MNIST."""

import copy
import dataclasses
import itertools
import json
import math
import sys

import pandas as pd
import pytest
import torch
from layout_checks import defects
from omegaconf import OmegaConf

from conftest import HARNESS_TRAIN, MNIST_DIR, REPO, compose_config, run_cli, tiny_cfg
from harness.errors import ConfigError, DataError
from harness.esgd import figures, methods, operators
from harness.esgd.app import build_study, execute, study_id
from harness.esgd.pool import Plan
from harness.esgd.rendering import render
from harness.esgd.tables import read_tables
from harness.esgd.trainer import Trainer
from harness.problems.classification.mnist import load_mnist
from harness.problems.classification.networks import MLP


@pytest.fixture(scope="module")
def problem(mnist_dir):
    return build_study(tiny_cfg())


@pytest.fixture(scope="module")
def wild_problem(mnist_dir):
    """A pool whose plain SGD draws learning rates far too large: SGD phases degrade."""
    return build_study(tiny_cfg("esgd.pool.sgd.ranges.lr=[10,1000]"))


def best_per_generation(rows: list[dict]) -> list[float]:
    frame = pd.DataFrame(rows)
    return frame[frame["selected"]].groupby("generation")["fitness"].min().tolist()


# --- elitism and back-off ----------------------------------------------------------------------


@pytest.mark.parametrize("evolve", [True, False])
def test_best_fitness_never_rises_between_generations(wild_problem, evolve):
    s = wild_problem.settings
    rows = methods.esgd(wild_problem, seed=3, evolve=evolve)
    best = best_per_generation(rows)
    assert len(best) == s.generations + 1
    assert all(b <= a for a, b in itertools.pairwise(best)), best
    assert best[-1] < best[0]
    frame = pd.DataFrame(rows)
    assert frame["backoffs"].sum() > 0  # the case was exercised
    for _, generation in frame.groupby("generation"):
        fittest = generation.loc[generation["fitness"].idxmin()]
        assert fittest["selected"]  # the fittest candidate always survives
        assert generation["selected"].sum() == s.population


def test_selection_keeps_the_elite_and_draws_the_rest_uniformly():
    fitness = [0.5, 0.1, math.nan, 0.3, 0.2, 0.9]
    generator = torch.Generator().manual_seed(0)
    counts = dict.fromkeys(range(6), 0)
    for _ in range(3000):
        chosen = operators.select(fitness, survivors=4, elite=2, generator=generator)
        assert chosen[:2] == [1, 4] and len(set(chosen)) == 4
        for i in chosen[2:]:
            counts[i] += 1
    # two of the four others, uniformly: each is drawn half of the time
    assert all(abs(counts[i] / 3000 - 0.5) < 0.05 for i in (0, 2, 3, 5)), counts
    assert operators.rank(fitness) == [1, 4, 3, 0, 5, 2]  # NaN is the worst


@pytest.fixture(scope="module")
def wide_problem(mnist_dir):
    """The pool with two more repository optimizers, added from the command line."""
    more = [f"+optimizer@esgd.pool.{name}.optimizer={name}" for name in ("nadam", "rmsprop")]
    ranges = [
        "+esgd.pool.nadam.ranges={lr:[0.001,0.01]}",
        "+esgd.pool.rmsprop.ranges={lr:[0.001,0.01]}",
    ]
    return build_study(tiny_cfg(*more, *ranges))


PAIRS = {
    "adam, momentum": ("adam", {"lr": 0.01}, "momentum", {"lr": 0.05, "momentum": 0.9}),
    "nadam, rmsprop": ("nadam", {"lr": 0.01}, "rmsprop", {"lr": 0.003}),
}


@pytest.mark.parametrize("pair", PAIRS.values(), ids=PAIRS.keys())
def test_backoff_restores_weights_optimizer_state_and_schedule_exactly(wide_problem, pair):
    problem = wide_problem
    population = problem.initial(torch.Generator().manual_seed(0))[:2]
    plans = [Plan(pair[0], pair[1], "cosine"), Plan(pair[2], pair[3], "cosine")]
    fixed = [(i, torch.arange(i * 50, (i + 1) * 50)) for i in range(3)]
    trainer = Trainer(problem, [p.model for p in population], plans, 12, itertools.cycle(fixed))
    trainer.train(3)  # optimizer state and schedule are under way
    snapshot = trainer.snapshot()
    state_before = copy.deepcopy(trainer.members.optimizers[0].state_dict())
    weights_before = [p.detach().clone() for p in population[0].model.parameters()]
    trainer.train(3)
    after = [p.detach().clone() for p in population[0].model.parameters()]
    other = [p.detach().clone() for p in population[1].model.parameters()]
    assert not torch.equal(after[0], weights_before[0])

    trainer.restore(snapshot, 0)
    for p, w in zip(population[0].model.parameters(), weights_before, strict=True):
        assert torch.equal(p, w)
    for p, w in zip(population[1].model.parameters(), other, strict=True):
        assert torch.equal(p, w)  # the others are left alone
    state = trainer.members.optimizers[0].state_dict()
    assert state["param_groups"] == state_before["param_groups"]
    for key, values in state_before["state"].items():
        for name, value in values.items():
            assert torch.equal(state["state"][key][name], value), name
    # ... and training on from there repeats the same steps bit for bit (step counts, moments,
    # the schedule's position: everything Adam's and the cosine's next steps depend on)
    trainer.train(3)
    for p, w in zip(population[0].model.parameters(), after, strict=True):
        assert torch.equal(p, w)


def test_sgd_phase_backs_off_an_individual_whose_fitness_degrades(problem):
    population = problem.initial(torch.Generator().manual_seed(1))[:2]
    initial = [[p.detach().clone() for p in i.model.parameters()] for i in population]
    start = [i.fitness for i in population]
    plans = [Plan("sgd", {"lr": 1e4}, "constant"), Plan("sgd", {"lr": 0.5}, "constant")]
    batches = problem.batches(100, torch.Generator().manual_seed(0))
    backoffs, used = methods.sgd_phase(problem, population, plans, batches, generation=1)
    s = problem.settings
    assert backoffs == {population[0].uid: s.sgd_steps // s.backoff_every, population[1].uid: 0}
    assert [used[i.uid]["step_lr"] for i in population] == [1e4, 0.5]  # constant schedules
    assert population[0].fitness == start[0]
    for p, w in zip(population[0].model.parameters(), initial[0], strict=True):
        assert torch.equal(p, w)
    assert population[1].fitness < start[1]
    assert problem.evaluate([population[0].model])[0][0] == pytest.approx(start[0], rel=1e-6)


# --- operators ---------------------------------------------------------------------------------


def test_recombination_is_the_parents_mean_plus_gaussian_noise_of_the_given_std():
    g = torch.Generator().manual_seed(0)
    a = [torch.randn(300, 400, generator=g), torch.randn(400, generator=g)]
    b = [torch.randn(300, 400, generator=g), torch.randn(400, generator=g)]
    kept = [t.clone() for t in a + b]
    assert all(torch.equal(c, p) for c, p in zip(operators.recombine([a], 0.0, g), a, strict=True))
    mean = operators.recombine([a, b], 0.0, g)
    assert all(torch.equal(m, (x + y) / 2) for m, x, y in zip(mean, a, b, strict=True))
    child = operators.recombine([a, b], 0.01, torch.Generator().manual_seed(5))
    noise = child[0] - mean[0]
    assert noise.std().item() == pytest.approx(0.01, rel=0.02)
    assert abs(noise.mean().item()) < 1e-4
    again = operators.recombine([a, b], 0.01, torch.Generator().manual_seed(5))
    assert all(torch.equal(x, y) for x, y in zip(child, again, strict=True))
    assert all(torch.equal(t, k) for t, k in zip(a + b, kept, strict=True))  # parents untouched


def test_parents_are_distinct_members_of_the_population():
    picks = operators.choose_parents(5, 200, 3, torch.Generator().manual_seed(0))
    assert len(picks) == 200
    assert all(len(set(p)) == 3 and all(0 <= i < 5 for i in p) for p in picks)
    assert {i for p in picks for i in p} == set(range(5))


def test_offspring_carry_their_parents_and_are_evaluated(problem):
    population = problem.initial(torch.Generator().manual_seed(0))
    children = methods.offspring(
        problem, population, 1, itertools.count(100), torch.Generator().manual_seed(0)
    )
    assert len(children) == problem.settings.offspring
    for child in children:
        assert len(child.parents) == problem.settings.parents and child.born == 1
        fitness = problem.evaluate([child.model])[0][0]
        assert child.fitness == pytest.approx(fitness, rel=1e-6)


# --- the population's initialisation, the one-parent operator and the offspring's warm steps --


def initial_tensors(problem, seed: int = 0) -> list[list[torch.Tensor]]:
    population = problem.initial(torch.Generator().manual_seed(seed))
    return [[p.detach().clone() for p in i.model.parameters()] for i in population]


def test_the_default_initial_population_is_independent_draws_as_before(problem):
    """The committed studies drew each individual from the init stream in turn: still so."""
    generator = torch.Generator().manual_seed(0)
    drawn = [problem.new_model(generator) for _ in range(problem.settings.population)]
    for model, tensors in zip(drawn, initial_tensors(problem), strict=True):
        assert all(torch.equal(p, t) for p, t in zip(model.parameters(), tensors, strict=True))
    first, second = initial_tensors(problem)[:2]
    assert not torch.equal(first[0], second[0])


def test_a_shared_initialisation_gives_identical_initial_networks(mnist_dir):
    shared = initial_tensors(build_study(tiny_cfg("esgd.population_init=shared")))
    assert len(shared) == 4
    for other in shared[1:]:
        assert all(torch.equal(a, b) for a, b in zip(shared[0], other, strict=True))
    jittered = initial_tensors(
        build_study(tiny_cfg("esgd.population_init=jitter", "esgd.population_init_std=0.01"))
    )
    for individual in jittered:  # the shared draw plus N(0, 0.01^2) of its own
        noise = individual[0] - shared[0][0]
        assert noise.std().item() == pytest.approx(0.01, rel=0.05)
    assert not torch.equal(jittered[0][0], jittered[1][0])


def test_a_one_parent_child_with_sigma_zero_is_an_exact_copy_of_its_parent(mnist_dir):
    problem = build_study(tiny_cfg("esgd.parents=1", "esgd.mutation_std=0"))
    population = problem.initial(torch.Generator().manual_seed(0))
    by_uid = {i.uid: i for i in population}
    children = methods.offspring(
        problem, population, 1, itertools.count(100), torch.Generator().manual_seed(0)
    )
    assert len({c.parents for c in children}) > 1  # not one parent copied again and again
    for child in children:
        parent = by_uid[child.parents[0]]
        pairs = list(zip(child.model.parameters(), parent.model.parameters(), strict=True))
        assert all(torch.equal(c, p) for c, p in pairs)
        assert child.fitness == parent.fitness
    with torch.no_grad():  # a copy, not the parent's tensors
        next(children[0].model.parameters()).add_(1.0)
    parent = by_uid[children[0].parents[0]]
    assert not torch.equal(next(children[0].model.parameters()), next(parent.model.parameters()))


def test_alignment_undoes_a_permutation_of_hidden_units_and_keeps_the_function(mnist_dir):
    """net3's three hidden layers, each shuffled: align() finds the reference's order again,
    the aligned network computes what it did, and the aligned mean of a network and its
    shuffled copy is the network (the plain mean is not)."""
    problem = build_study(tiny_cfg("model=net3", "esgd.recombination=aligned_mean"))
    model = problem.new_model(torch.Generator().manual_seed(0))
    reference = [p.detach().clone() for p in model.parameters()]
    g = torch.Generator().manual_seed(1)
    perms = [torch.randperm(len(b), generator=g) for b in reference[1:-2:2]]
    shuffled, previous = [], slice(None)
    for layer, (w, b) in enumerate(zip(reference[0::2], reference[1::2], strict=True)):
        rows = perms[layer] if layer < len(perms) else slice(None)
        shuffled += [w[rows][:, previous], b[rows]]
        previous = rows
    assert not torch.equal(shuffled[0], reference[0])
    aligned = operators.align(reference, shuffled)
    assert all(torch.equal(a, r) for a, r in zip(aligned, reference, strict=True))
    other = copy.deepcopy(model)
    with torch.no_grad():
        for p, t in zip(other.parameters(), shuffled, strict=True):
            p.copy_(t)
    x = problem.data.x_val[:50]
    torch.testing.assert_close(other(x), model(x), rtol=1e-5, atol=1e-6)  # the same function
    child = operators.recombine([reference, aligned], 0.0, g)
    assert all(torch.equal(c, r) for c, r in zip(child, reference, strict=True))
    plain = operators.recombine([reference, shuffled], 0.0, g)
    assert not torch.equal(plain[0], reference[0])


def test_aligned_offspring_of_two_copies_of_one_network_are_their_first_parent(mnist_dir):
    problem = build_study(tiny_cfg("esgd.recombination=aligned_mean", "esgd.mutation_std=0"))
    population = problem.initial(torch.Generator().manual_seed(0))[:2]
    g = torch.Generator().manual_seed(2)
    perm = torch.randperm(100, generator=g)  # net2: one hidden layer of 100 units, shuffled
    first = [p.detach().clone() for p in population[0].model.parameters()]
    shuffled = [first[0][perm], first[1][perm], first[2][:, perm], first[3]]
    with torch.no_grad():
        for p, t in zip(population[1].model.parameters(), shuffled, strict=True):
            p.copy_(t)
    children = methods.offspring(problem, population, 1, itertools.count(9), g)
    assert {c.parents[0] for c in children} == {0, 1}  # both orders of the units
    for child in children:
        parent = population[child.parents[0]].model.parameters()
        assert all(torch.equal(c, p) for c, p in zip(child.model.parameters(), parent, strict=True))


def test_warm_steps_are_counted_in_the_compute(mnist_dir, monkeypatch):
    """Every model-step trained, SGD phases and offspring warm steps alike, adds up to the
    budget mu x K x K_s; with W > 0 the offspring do train W steps each per generation."""
    steps: list[tuple[int, int]] = []  # (models trained together, steps)
    train = Trainer.train

    def counting(self, n):
        steps.append((len(self.members), n))
        train(self, n)

    monkeypatch.setattr(Trainer, "train", counting)
    for warm in (0, 1):
        # mu 4, lambda 8: W = 1 costs 8 model-steps, two fewer steps of each SGD phase
        problem = build_study(tiny_cfg("esgd.offspring=8", f"esgd.offspring_sgd_steps={warm}"))
        s = problem.settings
        steps.clear()
        rows = pd.DataFrame(methods.esgd(problem, seed=0))
        assert sum(k * n for k, n in steps) == s.population * s.generations * s.sgd_steps
        warm_steps = sum(n for k, n in steps if k == s.offspring)
        assert warm_steps == warm * s.generations
        assert sum(n for k, n in steps if k == s.population) == (s.sgd_steps - 2 * warm) * 3
        children = rows[rows["offspring"]]
        assert (children["optimizer"] != "").all() == bool(warm)  # their parent's plan
    no_evolution = build_study(tiny_cfg("esgd.offspring=8", "esgd.offspring_sgd_steps=1"))
    steps.clear()
    methods.esgd(no_evolution, seed=0, evolve=False)  # no offspring: the SGD phase is whole
    assert steps and all(k == 4 for k, _ in steps) and sum(n for _, n in steps) == 18


def test_inherited_plans_stay_with_their_individual_and_pass_to_its_children(mnist_dir):
    study = build_study(tiny_cfg("esgd.plans=inherit"))
    rows = pd.DataFrame(methods.esgd(study, seed=0))
    trained = rows[rows["generation"] >= 1]
    trained = trained[trained["hyperparameters"] != ""]
    # an individual trains with one plan in every generation it lives
    assert (trained.groupby("uid")["hyperparameters"].nunique() == 1).all()
    plan = trained.groupby("uid")["hyperparameters"].first()
    children = rows[rows["offspring"]].drop_duplicates("uid")
    heirs = children[children["uid"].isin(plan.index)]
    assert len(heirs) > 0  # some children survived to train
    for _, child in heirs.iterrows():
        assert plan[child["uid"]] == plan[int(child["parents"].split("+")[0])]
    # the initial population starts with the population baseline's plans, uid by uid
    baseline = pd.DataFrame(methods.independent(study, 0, "population", range(4), plans_of(0)))
    first = baseline[baseline["generation"] == 1].set_index("uid")["hyperparameters"]
    assert all(plan[uid] == first[uid] for uid in range(4) if uid in plan.index)
    # redraw (the default) gives an individual that lives on a new plan
    redrawn = rows_of(build_study(tiny_cfg()))
    assert (redrawn.groupby("uid")["hyperparameters"].nunique() > 1).any()


def plans_of(seed: int) -> list[Plan]:
    study = build_study(tiny_cfg())
    generator = methods.generators(seed)["plans"]
    return [study.pool.sample(generator) for _ in range(study.settings.population)]


def rows_of(study) -> pd.DataFrame:
    rows = pd.DataFrame(methods.esgd(study, seed=0))
    return rows[(rows["generation"] >= 1) & (rows["hyperparameters"] != "")]


# --- annealing: the rates plans are drawn with fall over the generations -----------------------


def cosine_or_constant(schedule: str, start: int, span: int) -> float:
    """Where the pool's schedules put the rate after `start` of `span` steps (cosine to 0)."""
    return 1.0 if schedule == "constant" else (1 + math.cos(math.pi * start / span)) / 2


def drawn(study, seed: int, count: int) -> list[Plan]:
    """The first `count` plans of the seed's plan stream, as ESGD draws them."""
    generator = methods.generators(seed)["plans"]
    return [study.pool.sample(generator) for _ in range(count)]


def trained_rows(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    return frame[(frame["generation"] >= 1) & ~frame["offspring"]]


def test_without_annealing_plans_are_the_draws_and_the_baselines_are_never_rebased(
    problem, monkeypatch
):
    """The default (anneal 1.0) computes what the code before it did: every plan is the draw
    itself, and no baseline optimizer is touched between its stretches."""
    s = problem.settings
    assert s.anneal == 1.0 and {s.rate_scale(k) for k in range(1, s.generations + 1)} == {1.0}
    monkeypatch.setattr(Trainer, "rebase", lambda *_: pytest.fail("rebased without annealing"))
    rows = trained_rows(methods.esgd(problem, seed=0, evolve=False))
    plans = drawn(problem, 0, s.generations * s.population)
    assert rows["hyperparameters"].tolist() == [p.describe() for p in plans]
    population = trained_rows(methods.independent(problem, 0, "population", range(4), plans[:4]))
    assert population["hyperparameters"].tolist() == [p.describe() for p in plans[:4]] * 3


def test_annealing_scales_the_drawn_rates_by_the_factor_of_each_generation(mnist_dir):
    """anneal 0.1 over K = 3: generation k's plans are the same draws with their rate times
    0.1^((k-1)/2) (1, 0.316, 0.1), to 3 digits; the rest of the plan is untouched, and the
    optimizer's first step uses that rate at its schedule's position."""
    study = build_study(tiny_cfg("esgd.anneal=0.1"))
    s = study.settings
    assert [s.rate_scale(k) for k in (1, 2, 3)] == pytest.approx([1, 0.1**0.5, 0.1])
    rows = trained_rows(methods.esgd(study, seed=0, evolve=False))
    plans = drawn(study, 0, s.generations * s.population)
    for (_, row), plan in zip(rows.iterrows(), plans, strict=True):
        scale = 0.1 ** ((row["generation"] - 1) / 2)
        assert row["lr"] == float(f"{plan.hyperparameters['lr'] * scale:.3g}")
        assert (row["optimizer"], row["schedule"]) == (plan.optimizer, plan.schedule)
        if "momentum" in plan.hyperparameters:
            assert row["momentum"] == plan.hyperparameters["momentum"]
        position = cosine_or_constant(
            row["schedule"], (row["generation"] - 1) * s.sgd_steps, s.steps
        )
        assert row["step_lr"] == pytest.approx(row["lr"] * position, rel=1e-9)
        low, high = study.pool.pool[plan.optimizer].ranges.lr  # the range, scaled
        assert low * scale * 0.995 <= row["lr"] <= high * scale * 1.005


@pytest.mark.parametrize("method", ["population", "single"])
def test_the_baselines_rates_follow_the_same_factor(mnist_dir, method):
    """A baseline individual keeps its plan, its rate times 0.1^((k-1)/2) in the k-th of its
    stretches (the single baseline's 4 times longer): the rate recorded is the one its
    optimizer steps with, at its schedule's position over the whole run."""
    study = build_study(tiny_cfg("esgd.anneal=0.1"))
    s = study.settings
    plans = drawn(study, 0, s.population)
    uids = range(4) if method == "population" else [1]
    mine = [plans[uid] for uid in uids]
    rows = trained_rows(methods.independent(study, 0, method, uids, mine))
    stretch = s.population * s.sgd_steps // len(mine)
    for _, row in rows.iterrows():
        plan = plans[row["uid"]]
        scale = 0.1 ** ((row["generation"] - 1) / 2)
        assert row["lr"] == float(f"{plan.hyperparameters['lr'] * scale:.3g}")
        assert row["optimizer"] == plan.optimizer and row["schedule"] == plan.schedule
        position = cosine_or_constant(
            plan.schedule, (row["generation"] - 1) * stretch, s.generations * stretch
        )
        assert row["step_lr"] == pytest.approx(row["lr"] * position, rel=1e-9)
    assert len(rows) == len(mine) * s.generations


def test_a_rebase_changes_only_the_rate_and_keeps_the_optimizer_state(problem):
    """Rebased on its own plans, a trainer goes on bit for bit as if nothing happened; on plans
    with another rate, its moments and step counts stay, and its rate and schedule are those a
    fresh build of the new plans has at that step."""
    population = problem.initial(torch.Generator().manual_seed(0))[:2]
    plans = [
        Plan("adam", {"lr": 0.01}, "cosine"),
        Plan("momentum", {"lr": 0.05, "momentum": 0.9}, "cosine"),
    ]
    fixed = [(i, torch.arange(i * 50, (i + 1) * 50)) for i in range(3)]

    def trained(rebase: list[Plan] | None) -> tuple[Trainer, list[MLP]]:
        models = [copy.deepcopy(p.model) for p in population]
        trainer = Trainer(problem, models, plans, 12, itertools.cycle(fixed))
        trainer.train(3)
        if rebase:
            trainer.rebase(rebase, start=3)
        return trainer, models

    plain, models = trained(None)
    again, same_models = trained(plans)
    for trainer in (plain, again):
        trainer.train(3)
    for a, b in zip(models, same_models, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))

    rebased, rebased_models = trained(None)
    state = copy.deepcopy([o.state_dict()["state"] for o in rebased.members.optimizers])
    slower = [plan.annealed(0.5) for plan in plans]
    rebased.rebase(slower, start=3)
    for optimizer, saved in zip(rebased.members.optimizers, state, strict=True):
        for key, values in saved.items():
            for name, value in values.items():
                assert torch.equal(optimizer.state_dict()["state"][key][name], value)
    for k, (plan, model) in enumerate(zip(slower, rebased_models, strict=True)):
        fresh, schedule = problem.pool.build(plan, model, 12, start=3)
        assert rebased.members.optimizers[k].param_groups[0]["lr"] == fresh.param_groups[0]["lr"]
        assert rebased.members.schedulers[k].state_dict() == schedule.state_dict()
    position = cosine_or_constant("cosine", 3, 12)
    assert rebased.used()[0]["step_lr"] == pytest.approx(0.005 * position)


@pytest.mark.slow
def test_committed_studies_are_recognised_under_todays_defaults(mnist_dir):
    """results/esgd/<net> ran before these settings existed: today's defaults are their
    study (so they resume and render again); a variant is another study."""
    for net, extra in (("net2", []), ("net3", ["model=net3", "device=cuda"])):
        record = json.loads((REPO / "results" / "esgd" / net / "esgd.json").read_text())
        root = record["config"]["data"]["root"]
        today = compose_config(["experiment=esgd", f"data.root={root}", *extra])
        assert study_id(OmegaConf.to_container(today, resolve=True)) == study_id(
            record["config"]
        ), net
        for variant in (
            "esgd.population_init=shared",
            "esgd.offspring_sgd_steps=1",
            "esgd.population_init=jitter",
            "esgd.recombination=aligned_mean",
            "esgd.plans=inherit",
            "esgd.anneal=0.1",
        ):
            other = compose_config(["experiment=esgd", f"data.root={root}", *extra, variant])
            assert study_id(OmegaConf.to_container(other, resolve=True)) != study_id(
                record["config"]
            ), variant


# --- fitness: the held-out training split, never the test set ---------------------------------


def test_fitness_split_is_held_out_of_the_training_data(problem):
    s = problem.data
    assert len(s.y_val) == 200 and len(s.y_train) == 1000  # data.val_size, data.train_size
    train_rows = {tuple(r) for r in s.x_train[:, ::7].tolist()}
    assert not any(tuple(r) in train_rows for r in s.x_val[:, ::7].tolist())
    # the data's validation split, as every other study holds it out
    data = load_mnist(MNIST_DIR, train_size=1000, test_size=200, val_size=200)
    assert torch.equal(s.x_val, data.x_val) and torch.equal(s.y_val, data.y_val)
    assert torch.equal(s.x_train, data.x_train) and torch.equal(s.x_test, data.x_test)


def test_fitness_and_selection_ignore_the_test_set(problem):
    rows = pd.DataFrame(methods.esgd(problem, seed=1))
    g = torch.Generator().manual_seed(0)
    data = problem.data
    garbage = dataclasses.replace(
        data,
        x_test=torch.randn(data.x_test.shape, generator=g),
        y_test=torch.randint(0, 10, data.y_test.shape, generator=g),
    )
    other = pd.DataFrame(methods.esgd(dataclasses.replace(problem, data=garbage), seed=1))
    same = ["generation", "uid", "optimizer", "lr", "fitness", "selected", "backoffs"]
    pd.testing.assert_frame_equal(rows[same], other[same])
    assert not rows["test_error"].equals(other["test_error"])
    # generation 0: fitness is the initial networks' loss on the held-out split
    initial = problem.initial(torch.Generator().manual_seed(0))
    assert [i.fitness for i in initial] == pytest.approx(
        problem.evaluate([i.model for i in initial])[0]
    )


# --- reproducibility and the tables ------------------------------------------------------------


@pytest.fixture(scope="module")
def study(tmp_path_factory, mnist_dir):
    """A tiny study, every method, two seeds: (its folder, its tables)."""
    folder = tmp_path_factory.mktemp("study")
    return folder, execute(tiny_cfg("esgd.repeats=2", "esgd.generations=2"), folder)


@pytest.mark.slow
def test_a_seeded_run_is_reproducible_table_for_table(study, tmp_path):
    folder, first = study
    second = execute(tiny_cfg("esgd.repeats=2", "esgd.generations=2"), tmp_path / "again")
    assert {"individuals", "offspring_share", "table1", "table6"} <= set(first)
    for name in first:
        pd.testing.assert_frame_equal(first[name], second[name], check_exact=True)
        pd.testing.assert_frame_equal(read_tables(folder)[name], first[name])
    other = execute(tiny_cfg("esgd.generations=2", "esgd.methods=[esgd]", "seed=5"), tmp_path)
    assert not other["individuals"]["fitness"].equals(first["individuals"]["fitness"])


def test_no_text_covers_another_in_the_studys_figures(study):
    """The ESGD study's own renderer (harness.esgd.figures), on the tiny study."""
    _, tables = study
    made = figures.make_figures(tables)
    assert set(made) == {"fitness", "optimizers"}
    assert defects(made) == {}


def test_the_study_writes_its_tables_figures_and_summary(study):
    folder, tables = study
    summary = (folder / "summary.md").read_text()
    for heading in ("## Table 1", "## Table 6", "## Figure 2", "ESGD − population baseline"):
        assert heading in summary
    for name in ("fitness", "optimizers"):
        assert (folder / f"{name}.png").is_file() and (folder / f"{name}.svg").is_file()
    s = build_study(tiny_cfg("esgd.generations=2")).settings
    individuals = tables["individuals"]
    esgd = individuals[(individuals["method"] == "esgd") & (individuals["generation"] > 0)]
    per_generation = esgd.groupby(["seed", "generation"])
    assert (per_generation.size() == s.population + s.offspring * s.evolution_steps).all()
    assert (per_generation["offspring"].sum() == s.offspring).all()
    share = per_generation.apply(lambda g: g["offspring"][g["selected"]].mean())
    assert tables["offspring_share"]["offspring_share"].tolist() == pytest.approx(share.tolist())
    elite = per_generation.apply(lambda g: g["offspring"][g["rank"] <= s.elite].mean())
    assert tables["offspring_share"]["elite_offspring_share"].tolist() == pytest.approx(
        elite.tolist()
    )
    table1 = tables["table1"].set_index(["method", "seed"])
    assert len(table1) == 4 * 2
    compute = s.population * s.generations * s.sgd_steps
    assert (table1["model_steps"] == compute).all()  # equal compute
    assert (table1.xs("single", level="method")["topk"] == 1).all()
    assert (table1.xs("esgd", level="method")["topk"] == s.top_k).all()
    start = individuals[individuals["generation"] == 0].pivot_table(
        index=["seed", "uid"], columns="method", values="fitness"
    )
    # every method starts from the same initial networks (the single baseline from one of them)
    assert (start.sub(start["esgd"], axis=0).fillna(0) == 0).all().all()
    assert start["single"].notna().sum() == 2
    table6 = tables["table6"]
    assert len(table6) == 2 * 2 * s.generations  # two methods draw plans, two seeds
    assert set(table6["optimizer"]) <= set(s.pool)


def test_table6_gives_the_best_individuals_optimizer_as_the_paper_writes_it(study):
    """Per method, seed and generation, the best trained individual's optimizer class, rate,
    momentum and Nesterov flag as its optimizer used them; over seeds, each class's share and
    median rate; a study recorded before the rows had them still renders, from its plans."""
    from harness.esgd import tables

    folder, written = study
    individuals, table6 = written["individuals"], written["table6"]
    trained = individuals[(individuals["optimizer"] != "") & ~individuals["offspring"]]
    for row in table6.itertuples():
        mine = trained[
            (trained["method"] == row.method)
            & (trained["seed"] == row.seed)
            & (trained["generation"] == row.generation)
        ]
        best = mine.sort_values(["fitness", "uid"]).iloc[0]
        assert (row.optimizer_class, row.lr, row.step_lr) == (
            best["optimizer_class"],
            best["lr"],
            best["step_lr"],
        )
        sgd = row.optimizer_class == "SGD"
        assert isinstance(row.nesterov, bool) == sgd and math.isnan(row.step_momentum) != sgd
    summary = tables.table6_summary(table6)
    assert (summary["seeds"] == 2).all()
    shares = summary[[c for c in summary.columns if c.endswith(" (%)")]]
    assert shares.sum(axis=1).tolist() == pytest.approx([100] * len(summary))
    for (method, generation), group in table6.groupby(["method", "generation"]):
        line = summary[(summary["method"] == method) & (summary["generation"] == generation)]
        for name, rows in group.groupby(tables.family(group)):
            assert line[f"{name}: median lr"].item() == rows["lr"].median()
            assert line[f"{name} (%)"].item() == pytest.approx(100 * len(rows) / 2)
    assert (
        "Over seeds: the best individual's optimizer class" in (folder / "summary.md").read_text()
    )

    paper = pd.DataFrame(
        {
            "optimizer_class": ["SGD", "Adam", "SGD", None],
            "nesterov": [False, None, True, None],
            "lr": [3.61e-4, 2.68e-4, 5.6e-3, 0.1],
            "step_momentum": [0.0, math.nan, 0.11, math.nan],
            "hyperparameters": ["", "", "", "sgd (lr=0.1; constant)"],
        }
    )
    assert [tables.as_paper(row) for row in paper.itertuples()] == [
        "sgd, nesterov=F, lr=3.61e-4, momentum=0",  # as the paper's Table 6 writes them
        "adam, lr=2.68e-4",
        "sgd, nesterov=T, lr=5.60e-3, momentum=0.11",
        "sgd (lr=0.1; constant)",  # recorded before optimizers were: the plan
    ]
    old = tables.table6(individuals.drop(columns=list(tables.USED)))
    first = old[(old["method"] == "esgd") & (old["seed"] == 0) & (old["generation"] == 1)]
    assert f"| {first['hyperparameters'].item()} |" in tables.table6_markdown(old, 0)
    assert "first-step" not in tables.table6_summary_markdown(old)


# --- bad settings ------------------------------------------------------------------------------

BAD = {
    "no elite": (["esgd.elite=0"], "esgd.elite must be >= 1, got 0"),
    "elite above mu": (["esgd.elite=5"], "esgd.elite (5) must be at most esgd.population (4)"),
    "population of one": (["esgd.population=1"], "esgd.population must be >= 2, got 1"),
    "back-off not dividing": (["esgd.backoff_every=4"], "esgd.backoff_every (4) must divide"),
    "too many parents": (["esgd.parents=9"], "esgd.parents (9) must be at most"),
    "negative sigma": (["esgd.mutation_std=-1"], "esgd.mutation_std must be >= 0, got -1"),
    "zero lr range": (["esgd.pool.sgd.ranges.lr=[0,1]"], "esgd.pool.sgd.ranges.lr must be [low"),
    "unknown method": (["esgd.methods=[esgd,foo]"], "esgd.methods must be a list of"),
    "single alone": (["esgd.methods=[single]"], "the single baseline needs the population"),
    "no validation split": (["data.val_size=0"], "ESGD measures fitness on training examples"),
    "negative validation": (["data.val_size=-1"], "data.val_size must be >= 0, got -1"),
    "the old fitness key": (
        ["esgd.fitness_size=200"],
        "esgd.fitness_size is now data.val_size: fitness is measured on the data's validation "
        "split (data.val_size=200)",
    ),
    "too few left for a batch": (
        ["data.train_size=null", "data.val_size=59990"],
        "SGD has 10 training examples (data.train_size, or what data.val_size leaves), fewer "
        "than train.batch_size (50)",
    ),
    "hyper-parameter the optimizer lacks": (
        ["+esgd.pool.adam.ranges.momentum=[0.5,0.9]"],
        "esgd pool: adam (lr=0.0003, momentum=0.5; constant) cannot be built",
    ),
    "integer of the wrong type": (["esgd.generations=2.5"], "esgd.generations must be an integer"),
    "unknown plan rule": (["esgd.plans=keep"], "esgd.plans must be one of redraw, inherit"),
    "unknown initialisation": (
        ["esgd.population_init=random"],
        "esgd.population_init must be one of independent, shared, jitter; got 'random'",
    ),
    "jitter without its std": (
        ["esgd.population_init=jitter"],
        "esgd.population_init_std must be > 0 with esgd.population_init=jitter and 0 otherwise; "
        "got 0.0 with jitter",
    ),
    "an init std unused": (
        ["esgd.population_init=shared", "esgd.population_init_std=0.1"],
        "got 0.1 with shared",
    ),
    "unknown recombination": (
        ["esgd.recombination=median"],
        "esgd.recombination must be one of mean, aligned_mean; got 'median'",
    ),
    "negative warm steps": (
        ["esgd.offspring_sgd_steps=-1"],
        "esgd.offspring_sgd_steps must be >= 0, got -1",
    ),
    "warm steps not shared out": (
        ["esgd.offspring=3", "esgd.offspring_sgd_steps=1"],
        "the offspring's 3 warm steps per generation (K_v x lambda x W) come out of the SGD",
    ),
    "annealing factor zero": (["esgd.anneal=0"], "esgd.anneal must be a number > 0 (1.0: off)"),
    "annealing factor negative": (
        ["esgd.anneal=-0.5"],
        "must be a number > 0 (1.0: off), got -0.5",
    ),
    "annealing factor a word": (["esgd.anneal=fast"], "esgd.anneal must be a number, got 'fast'"),
    "annealing a rate not drawn": (
        ["esgd.anneal=0.1", "~esgd.pool.adam.ranges"],
        "esgd.anneal scales the drawn rates: esgd.pool.adam needs ranges.lr",
    ),
    "warm steps eating the SGD phase": (
        ["esgd.offspring_sgd_steps=6"],
        "the offspring's 24 warm steps per generation",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("overrides,message", BAD.values(), ids=BAD.keys())
def test_bad_settings_raise_one_config_error_line(overrides, message, mnist_dir):
    with pytest.raises(ConfigError) as error:
        build_study(tiny_cfg(*overrides))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_validation_split_too_large_for_the_training_data_is_one_data_error(mnist_dir):
    with pytest.raises(DataError) as error:
        build_study(tiny_cfg("data.val_size=59500"))
    message = str(error.value)
    assert "\n" not in message
    assert "data.val_size (59500) leaves fewer than data.train_size (1000)" in message
    assert "of the 60000 training examples" in message


def test_without_the_preset_the_error_says_so():
    with pytest.raises(ConfigError, match="compose with experiment=esgd"):
        build_study(compose_config([f"data.root={MNIST_DIR}"]))


COMMANDS = {
    "harness-train": HARNESS_TRAIN,
    "python -m harness.esgd": (sys.executable, "-m", "harness.esgd"),
}


CLI_BAD = {
    "top_k": ("esgd.top_k=17", "esgd.top_k (17) must be at most esgd.population (16)"),
    "anneal": ("esgd.anneal=0", "esgd.anneal must be a number > 0 (1.0: off), got 0"),
    # an old command: the key is still in the preset (null), so Hydra does not refuse it first
    "old fitness key": ("esgd.fitness_size=10000", "esgd.fitness_size is now data.val_size"),
}


@pytest.mark.slow
@pytest.mark.parametrize("override,message", CLI_BAD.values(), ids=CLI_BAD.keys())
@pytest.mark.parametrize("prog", COMMANDS)
def test_the_app_reports_bad_settings_in_one_line(prog, override, message, tmp_path):
    preset = ["experiment=esgd"] if prog == "harness-train" else []
    result = run_cli(
        *preset,
        f"data.root={MNIST_DIR}",
        override,
        f"hydra.run.dir={tmp_path}",
        cwd=REPO,
        command=COMMANDS[prog],
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("harness-train: error:"), lines
    assert message in lines[0]
    assert not (tmp_path / "esgd.json").exists()


@pytest.mark.slow
def test_a_sweep_of_esgd_studies_is_refused_in_one_line(tmp_path):
    result = run_cli(
        "-m",
        "experiment=esgd",
        "model=net1,net2",
        f"data.root={MNIST_DIR}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        cwd=REPO,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "one study per command" in lines[0], lines
    assert not (tmp_path / "sweep").exists()


# --- an interrupted study resumes; a grown one adds seeds ---------------------------------------


@pytest.mark.slow
def test_more_repeats_add_seeds_and_give_the_uninterrupted_study(study, tmp_path):
    """Seed by seed saving: a study of 1 seed, then asked for 2, trains only the second and
    ends with the same tables as the study that ran both at once."""
    _, whole = study
    execute(tiny_cfg("esgd.repeats=1", "esgd.generations=2"), tmp_path)
    first_seed = json.loads((tmp_path / "esgd.json").read_text())["seconds"]
    assert list(first_seed) == ["0"]
    grown = execute(tiny_cfg("esgd.repeats=2", "esgd.generations=2"), tmp_path)
    record = json.loads((tmp_path / "esgd.json").read_text())
    assert record["seconds"]["0"] == first_seed["0"]  # not trained again
    assert record["devices"] == {"0": "cpu", "1": "cpu"}
    for name in whole:
        pd.testing.assert_frame_equal(grown[name], whole[name], check_exact=True)


@pytest.mark.slow
def test_harness_report_draws_an_esgd_study_again(study, tmp_path):
    from harness.report import main as report_main

    folder, tables = study
    report_main([str(folder), "--out", str(tmp_path)])
    for name, frame in read_tables(tmp_path).items():
        pd.testing.assert_frame_equal(frame, tables[name], check_exact=True)
    assert (tmp_path / "summary.md").read_text() == (folder / "summary.md").read_text()
    assert (tmp_path / "fitness.png").is_file() and (tmp_path / "esgd.json").is_file()


@pytest.mark.slow
def test_variants_put_studies_side_by_side(study, tmp_path):
    from harness.esgd import tables, variants

    folder, first = study
    shared = execute(
        tiny_cfg("esgd.repeats=2", "esgd.generations=2", "esgd.population_init=shared"),
        tmp_path / "shared",
    )
    variants.main([str(folder), str(tmp_path / "shared"), "--out", str(tmp_path / "out")])
    text = (tmp_path / "out" / "variants.md").read_text()
    assert f"| {folder.name} (as committed) | 2 |" in text
    assert "| shared (population_init=shared) | 2 |" in text
    assert (tmp_path / "out" / "variants.png").is_file()
    assert (
        "ESGD − population baseline | 2 | " + tables.variants({"x": first})["Δ fitness"][0]
        in (folder / "summary.md").read_text()
    )
    born = tables.birth(shared["individuals"])
    assert len(born) == 2 * 2 * 4  # seeds x generations x lambda
    child = born.iloc[0]
    esgd = shared["individuals"][shared["individuals"]["method"] == "esgd"]
    rows = esgd.set_index(["seed", "generation", "uid"])
    row = rows.loc[(child.seed, child.generation, child.uid)]
    parents = [
        rows.loc[(child.seed, child.generation, int(u)), "fitness"] for u in row.parents.split("+")
    ]
    assert child.ratio == pytest.approx(row.fitness / (sum(parents) / len(parents)))


@pytest.mark.slow
def test_the_summary_names_the_held_out_size_of_old_and_new_records(study, tmp_path):
    folder, _ = study
    assert "fitness on 200 held-out training examples" in (folder / "summary.md").read_text()
    old = tmp_path / "old"  # a study recorded before the validation split: esgd.fitness_size
    old.mkdir()
    for path in folder.glob("*.parquet"):
        (old / path.name).write_bytes(path.read_bytes())
    record = json.loads((folder / "esgd.json").read_text())
    assert "fitness_size" not in record["config"]["esgd"]  # the preset's placeholder: not kept
    del record["config"]["data"]["val_size"]
    record["config"]["esgd"]["fitness_size"] = 123
    (old / "esgd.json").write_text(json.dumps(record))
    render(old)
    assert "fitness on 123 held-out training examples" in (old / "summary.md").read_text()


def test_a_study_recorded_with_fitness_size_resumes_where_it_held_out_the_same_images(mnist_dir):
    """Before the validation split, a study held out esgd.fitness_size training images with
    a generator of its own seeded 0. On all of MNIST (subset_seed 0) those are the images
    data.val_size holds out now, so its rows are this study's and it resumes; on any other
    data they are not, and it does not."""
    new = OmegaConf.to_container(compose_config(["experiment=esgd"]), resolve=True)
    old = copy.deepcopy(new)
    del old["data"]["val_size"], old["esgd"]["fitness_size"]
    old["esgd"]["fitness_size"] = 10000
    assert study_id(old) == study_id(new)
    assert study_id({**old, "esgd": {**old["esgd"], "fitness_size": 5000}}) != study_id(new)
    for key, value in {"train_size": 20000, "test_size": 1000, "subset_seed": 1}.items():
        other_old, other_new = copy.deepcopy(old), copy.deepcopy(new)
        other_old["data"][key] = other_new["data"][key] = value
        assert study_id(other_old) != study_id(other_new), key

    whole = load_mnist(MNIST_DIR)  # the old split, as harness/esgd/data.py drew it
    perm = torch.randperm(60000, generator=torch.Generator().manual_seed(0))
    fit, train = perm[:10000].sort().values, perm[10000:].sort().values
    now = load_mnist(MNIST_DIR, val_size=10000)
    assert torch.equal(whole.x_train[fit], now.x_val) and torch.equal(whole.y_train[fit], now.y_val)
    assert torch.equal(whole.x_train[train], now.x_train)
    assert torch.equal(whole.x_test, now.x_test)


def test_a_folder_holding_another_study_is_left_alone(study):
    folder, _ = study
    before = (folder / "individuals.parquet").read_bytes()
    with pytest.raises(ConfigError, match="holds an ESGD study of another config"):
        execute(tiny_cfg("esgd.repeats=2", "esgd.generations=3"), folder)
    # a bad setting is told first: the other study is not what the user has to fix
    with pytest.raises(ConfigError, match="esgd.fitness_size is now data.val_size"):
        execute(tiny_cfg("esgd.repeats=2", "esgd.fitness_size=200"), folder)
    assert (folder / "individuals.parquet").read_bytes() == before
