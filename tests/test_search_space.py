"""The search over every hyper-parameter (harness.tuning.spaces): each range holds its library's
default, decays are drawn as 1 - beta, lists element by element, a weight decay may be 0, an
optimizer's own entry changes its space, and the zoo's richer study carries every tuned key
from phase to phase."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser

from conftest import REPO, run_cli
from harness.errors import ConfigError
from harness.optimizers.catalogue import config_of
from harness.tuning import spaces
from harness.tuning.dimensions import Dimension, exact_text
from harness.tuning.search import (
    check_protocol,
    search_space,
    trials,
    tuned_keys,
)

LOG_LR = "tag(log, interval(1.0e-4, 3.0))"
RULE = {
    "method": "random",
    "budget": 12,
    "seed": 0,
    "every_hyperparameter": True,
    "space": {
        "default": {"optimizer.lr": LOG_LR},
        "yellowfin": {},
        "rmsprop": {"optimizer.lr": LOG_LR, "optimizer.alpha": "second_moment"},
    },
}
# The richer study's members: the course's, the Schedule-Free family's and the zoo's best.
MEMBERS = [
    "sgd", "momentum", "nesterov", "adagrad", "adadelta", "rmsprop", "adam", "adamax", "nadam",
    "schedulefree_adamw", "schedulefree_sgd", "schedulefreesgd", "came", "adafactor", "pnm",
    "sgdp", "soap", "adagc", "amos", "alice", "mars", "ftrl", "scionlight", "dadaptadagrad",
]  # fmt: skip


def optimizer_node(name: str) -> dict:
    """An optimizer's config as `optimizer=<name>` composes it: the curated file, else the
    catalogue's."""
    path = REPO / "conf" / "optimizer" / f"{name}.yaml"
    return yaml.safe_load(path.read_text()) if path.exists() else config_of(name)


def parsed(override: str):
    """An override's value as Hydra reads it from the command line."""
    return OverridesParser.create().parse_override(override).value()


def contains(dimension: Dimension, default) -> bool:
    if dimension.elements is not None:
        return all(
            contains(e, d) if isinstance(e, Dimension) else e == d
            for e, d in zip(dimension.elements, default, strict=True)
        )
    value = 1 - default if dimension.complement else default
    return (dimension.zero and value == 0) or dimension.low <= value <= dimension.high


@pytest.mark.parametrize("name", MEMBERS)
def test_every_range_holds_its_librarys_default(name):
    node = optimizer_node(name)
    space = search_space(RULE, name, node)
    assert space, name
    for dimension in space:
        key = dimension.key.removeprefix("optimizer.")
        if key == "lr":  # the rate's range is the written one, centred by tune.centre
            continue
        assert contains(dimension, node[key]), (name, dimension)


def test_the_rule_tunes_the_keys_it_knows_by_name_and_holds_what_sets_the_optimizer():
    keys = {
        n: [d.key.removeprefix("optimizer.") for d in search_space(RULE, n, optimizer_node(n))]
        for n in ("sgd", "momentum", "adam", "rmsprop", "adagrad")
    }
    # plain SGD's momentum is 0: momentum would make it another optimizer (the course's)
    assert keys["sgd"] == ["lr", "weight_decay"]
    assert keys["momentum"] == ["lr", "momentum", "weight_decay"]
    assert keys["adam"] == ["betas", "eps", "lr", "weight_decay"]
    # RMSprop's alpha by its own entry; its momentum (0) held
    assert keys["rmsprop"] == ["alpha", "eps", "lr", "weight_decay"]
    assert keys["adagrad"] == ["eps", "lr", "weight_decay"]
    assert search_space(RULE, "yellowfin", {"lr": 1.0, "momentum": 0.0}) == []
    # PNM's beta2 of 1 is no decay to search: held, its beta1 drawn
    (betas,) = [d for d in search_space(RULE, "pnm", optimizer_node("pnm")) if "betas" in d.key]
    assert isinstance(betas.elements[0], Dimension) and betas.elements[1] == 1.0


def test_a_list_of_betas_is_drawn_element_by_element_and_passed_as_a_list():
    came = optimizer_node("came")  # betas (0.9, 0.999, 0.9999): the third held
    (betas,) = [d for d in search_space(RULE, "came", came) if d.key == "optimizer.betas"]
    found = trials([betas], "random", 200, 0, ["optimizer=came"])
    values = [parsed(t[0]) for t in found]
    assert all(isinstance(v, list) and len(v) == 3 and v[2] == 0.9999 for v in values)
    first = np.array([1 - v[0] for v in values])
    second = np.array([1 - v[1] for v in values])
    assert first.min() >= 1e-3 - 1e-9 and first.max() <= 1
    assert second.min() >= 1e-4 - 1e-9 and second.max() <= 0.1 + 1e-9
    # 1 - beta log-uniform: half the draws below the middle decade of each range
    assert 0.4 < np.mean(np.log10(first) < -1.5) < 0.6
    assert 0.4 < np.mean(np.log10(second) < -2.5) < 0.6
    assert abs(np.corrcoef(first, second)[0, 1]) < 0.2  # drawn independently


def test_a_decay_keeps_four_significant_digits_of_one_minus_beta():
    dimension = spaces.kind_dimension("optimizer.momentum", spaces.FIRST_MOMENT, 0.9)
    assert dimension.text(1 - 8.7654321e-5) == "0.99991235"
    assert dimension.text(0.9) == "0.9"
    assert dimension.text(0.0) == "0.0"
    for value in (1 - 8.7654321e-5, 0.123456, 0.99, 1 - 3.3e-4):
        back = parsed(f"optimizer.momentum={dimension.text(value)}")
        assert math.isclose(1 - back, 1 - value, rel_tol=1e-3)


def test_a_weight_decay_is_off_in_a_quarter_of_the_draws_and_log_uniform_otherwise():
    dimension = spaces.kind_dimension("optimizer.weight_decay", spaces.WEIGHT_DECAY, 0.0)
    draws = np.array([dimension.draw(np.random.default_rng(i)) for i in range(2000)])
    assert 0.2 < np.mean(draws == 0) < 0.3
    on = draws[draws > 0]
    assert on.min() >= 1e-5 and on.max() <= 0.1
    assert 0.45 < np.mean(on < 1e-3) < 0.55  # the middle of four decades
    assert dimension.text(0.0) == "0.0" and isinstance(parsed("w=" + dimension.text(0.0)), float)
    # a default outside the range widens it: AdaGC's 0.1 and a default of 0.5
    wide = spaces.kind_dimension("optimizer.weight_decay", spaces.WEIGHT_DECAY, 0.5)
    assert wide.high == 0.5 and wide.low == 1e-5


def test_draws_are_reproducible_and_differ_by_combination():
    space = search_space(RULE, "adam", optimizer_node("adam"))
    one = trials(space, "random", 12, 0, ["model=net1", "optimizer=adam"])
    assert one == trials(space, "random", 12, 0, ["model=net1", "optimizer=adam"])
    assert one != trials(space, "random", 12, 0, ["model=net2", "optimizer=adam"])
    assert one != trials(space, "random", 12, 1, ["model=net1", "optimizer=adam"])
    # a larger budget keeps these trials first: the study can grow without training them again
    assert trials(space, "random", 24, 0, ["model=net1", "optimizer=adam"])[:12] == one
    assert len({tuple(t) for t in one}) == 12


def test_a_shortlist_carries_each_value_back_exactly():
    for value in (0.0, 1.0, 3, 0.003162, 0.99991234, 1e-05, [0.9, 0.999], [None, 0.001]):
        back = parsed(f"k={exact_text(value)}")
        assert back == value and type(back) is type(value)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"adam": {"optimizer.eps": "third_moment"}}, "or a kind of the rule: first_moment"),
        ({"sgd": {"optimizer.alpha": "second_moment"}}, "optimizer sgd has no alpha"),
        ({"sgd": {"optimizer.momentum": "first_moment"}}, "needs a default it can search"),
    ],
)
def test_an_own_entry_that_cannot_be_searched_is_one_config_error(entry, message):
    tune = {**RULE, "space": {**RULE["space"], **entry}}
    (name,) = entry
    with pytest.raises(ConfigError, match=message):
        check_protocol(tune)
        search_space(tune, name, optimizer_node(name))


def test_an_own_entry_replaces_a_range_or_holds_a_key():
    own = {"optimizer.eps": None, "optimizer.weight_decay": "choice(0.0, 0.1)"}
    tune = {**RULE, "space": {**RULE["space"], "adam": own}}
    space = {d.key: d for d in search_space(tune, "adam", optimizer_node("adam"))}
    assert sorted(space) == ["optimizer.betas", "optimizer.lr", "optimizer.weight_decay"]
    assert space["optimizer.weight_decay"].values == (0.0, 0.1)
    assert "optimizer.betas" in tuned_keys(RULE) and "optimizer.alpha" in tuned_keys(RULE)


def test_the_rule_refuses_a_grid():
    with pytest.raises(ConfigError, match="needs tune.method=random"):
        check_protocol({**RULE, "method": "grid"})


@pytest.mark.slow
def test_the_richer_zoos_three_phases_carry_every_tuned_key(tmp_path):
    """The presets end to end on tiny runs: phase 1 draws each optimizer's own keys, phase 2
    trains its three best again with all their values, phase 3 the best of those with seeds 1-3,
    every key as phase 2 had it."""
    from harness.results import load_runs

    small = ["data.train_size=500", "data.val_size=200", "model=net1"]
    small.append('tune.optimizers="sgd,adam,rmsprop"')
    phases = [
        ("zoo_search_tune", "tune", ["train.iterations=40", "tune.budget=3"]),
        (
            "zoo_search_shortlist",
            "short",
            ["train.iterations=60", f"tune.source={tmp_path / 'tune'}"],
        ),  # fmt: skip
        ("zoo_search", "eval", ["train.iterations=60", f"tune.source={tmp_path / 'short'}"]),
    ]
    for experiment, name, extra in phases:
        command = [f"experiment={experiment}", *small, *extra, f"hydra.sweep.dir={tmp_path / name}"]
        result = run_cli("-m", *command, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
    keys = ["optimizer.lr", "optimizer.weight_decay", "optimizer.betas", "optimizer.eps"]
    keys.append("optimizer.alpha")
    tune, short, evaluation = (load_runs(tmp_path / n) for n in ("tune", "short", "eval"))
    assert len(short) == 9 and len(evaluation) == 9 and set(evaluation["seed"]) == {1, 2, 3}
    assert set(tune.loc[tune["optimizer"] == "adam", "optimizer.betas"].dropna()) > set()
    # every phase-2 setting is a phase-1 trial, every phase-3 setting a phase-2 one
    settings = [c for c in keys if c in tune]
    as_set = lambda t: {tuple(map(str, r)) for r in t[["optimizer", *settings]].to_numpy()}  # noqa: E731
    assert as_set(short) <= as_set(tune)
    assert as_set(evaluation) <= as_set(short) and len(as_set(evaluation)) == 3
    best = short.loc[short.groupby("optimizer")["final_val_accuracy"].idxmax()]
    assert as_set(evaluation) == as_set(best)
