"""The optimizer catalogue: optimizer=<name> for every optimizer class of torch.optim,
schedulefree and pytorch-optimizer, every constructor default spelled out in the config."""

import inspect
import subprocess
import sys

import pytest
import torch
from hydra.utils import get_class
from omegaconf import OmegaConf

from conftest import CONF_DIR, REPO, SMALL_RUN, compose_config
from harness.config.class_paths import build
from harness.errors import ConfigError
from harness.optimizers.catalogue import (
    HARNESS_KEYS,
    NOT_HYPERPARAMETERS,
    RUN_LENGTH_ARGUMENTS,
    catalogue,
)
from harness.training.building import optimizer_and_schedule, optimizer_factory

CURATED = sorted(p.stem for p in (CONF_DIR / "optimizer").glob("*.yaml"))
# Names the catalogue must hold: the optimizers a user asks about (issue 18), by package.
EXPECTED = [
    "lbfgs", "rprop", "asgd",  # torch.optim
    "schedulefree_adamw", "schedulefree_sgd",  # schedulefree
    "lion", "adan", "adopt", "prodigy", "soap", "madgrad", "lamb", "ranger21", "kron",  # pto
    "pto_adamax", "pto_muon",  # pytorch-optimizer's own where torch.optim has the name
]  # fmt: skip


def test_the_catalogue_holds_what_users_ask_for_and_every_name_is_one_class():
    names = catalogue()
    assert set(EXPECTED) <= set(names)
    assert len(names) > 120
    assert names["pto_adamax"].__module__.startswith("pytorch_optimizer")
    assert names["adamax"] is torch.optim.Adamax


@pytest.mark.slow
@pytest.mark.parametrize("name", CURATED)
def test_a_curated_name_is_its_file(name):
    cfg = compose_config([f"optimizer={name}"])
    assert OmegaConf.to_container(cfg.optimizer) == OmegaConf.to_container(
        OmegaConf.load(CONF_DIR / "optimizer" / f"{name}.yaml")
    )


@pytest.mark.slow
def test_composing_a_curated_optimizer_does_not_import_the_catalogue():
    code = (
        "import sys; from conftest import compose_config; compose_config(['optimizer=adam']); "
        "print('harness.optimizers.catalogue' in sys.modules, 'pytorch_optimizer' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO / "tests"
    )
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.slow
def test_every_catalogue_name_composes_with_every_default_spelled_out():
    names = [n for n in catalogue() if n not in CURATED]
    for name in names:
        cfg = compose_config([f"optimizer={name}"])
        cls = get_class(cfg.optimizer._target_)
        assert cls is catalogue()[name], name
        expected = {
            key: p
            for key, p in inspect.signature(cls).parameters.items()
            if key not in NOT_HYPERPARAMETERS and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        }
        keys = [k for k in cfg.optimizer if not k.startswith("_") and k not in HARNESS_KEYS]
        assert keys == list(expected), name
        for key, parameter in expected.items():
            if parameter.default is parameter.empty and key in RUN_LENGTH_ARGUMENTS:
                assert cfg.optimizer[key] is None, (name, key)  # the run supplies it
            elif parameter.default is parameter.empty:
                assert OmegaConf.is_missing(cfg.optimizer, key), (name, key)


def test_a_catalogue_optimizer_is_overridden_like_a_file_and_builds():
    cfg = compose_config(["optimizer=lion", "optimizer.lr=0.003", "optimizer.betas=[0.8,0.95]"])
    net = torch.nn.Linear(3, 2)
    optimizer = build(cfg.optimizer)(net.parameters())
    assert type(optimizer).__name__ == "Lion"
    assert optimizer.param_groups[0]["lr"] == 0.003
    assert list(optimizer.param_groups[0]["betas"]) == [0.8, 0.95]
    ranger = compose_config(["optimizer=ranger21", "optimizer.num_iterations=100"])
    assert ranger.optimizer.num_iterations == 100 and "lookahead_merge_time" in ranger.optimizer


@pytest.mark.parametrize("iterations", [100, 400])
def test_ranger21_plans_its_warm_down_by_the_runs_length_unless_told(iterations):
    """Ranger21's num_iterations (no default) is the run's number of steps when the config
    leaves it null, and the config's value when it sets one."""
    cls = catalogue()["ranger21"]
    for overrides, steps in (([], iterations), (["optimizer.num_iterations=50"], 50)):
        cfg = compose_config(["optimizer=ranger21", *overrides])
        net = torch.nn.Linear(3, 2)
        optimizer, _ = optimizer_and_schedule(
            cfg.optimizer, cfg.schedule, net.parameters(), iterations
        )
        expected = cls(torch.nn.Linear(3, 2).parameters(), num_iterations=steps)
        assert optimizer.start_warm_down == expected.start_warm_down, overrides


def test_an_epochs_budget_gives_the_probes_the_runs_length(mnist_dir):
    """The stacking and checkpoint probes build Ranger21 with the run's steps also when the run
    is budgeted in epochs (of its training set: 2,000 examples here, in batches of 128)."""
    from harness.stacking import grouping
    from harness.training import job as datasets
    from harness.training import preflight, restore_probe
    from harness.training.job import Job

    overrides = ["optimizer=ranger21", "train.iterations=null", "train.epochs=2"]
    cfg = compose_config([f"data.root={mnist_dir}", *SMALL_RUN, *overrides])
    job = Job.of(cfg, "unused")
    steps = 2 * (datasets.train_size(job) // cfg.train.batch_size)
    assert datasets.train_size(job) == 2000 and datasets.run_length(job) == steps == 30
    grouping.refusal(job)
    restore_probe.probe([job])
    assert {key[-1] for key in preflight.measured()["stacks"]} >= {steps}
    assert {key[-1] for key in preflight.measured()["restores"]} >= {steps}


@pytest.mark.slow
def test_harness_optimizers_lists_files_then_the_catalogue():
    out = subprocess.run(
        [sys.executable, "-c", "from harness.cli import optimizers_main; optimizers_main()"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    names = [line.split()[0] for line in out]
    assert names[: len(CURATED)] == CURATED
    assert len(names) == len(set(names)) == len(set(CURATED) | set(catalogue()))
    assert any(
        line.split()[:2] == ["lion", "pytorch_optimizer.optimizer.lion.Lion"] for line in out
    )


def test_a_tuple_argument_given_as_a_list_is_built_as_the_constructor_declares_it():
    """QHAdam checks isinstance(nus, tuple): the config's list [0.7, 1.0] is passed as a tuple."""
    cfg = compose_config(["optimizer=qhadam", "optimizer.nus=[0.7,1.0]"])
    net = torch.nn.Linear(3, 2)
    optimizer, _ = optimizer_and_schedule(cfg.optimizer, cfg.schedule, net.parameters(), 10)
    assert optimizer.param_groups[0]["nus"] == (0.7, 1.0)
    net(torch.ones(4, 3)).sum().backward()
    optimizer.step()  # one quasi-hyperbolic step with both discount factors


def test_a_muon_like_optimizer_gets_its_parameter_split_recorded_in_the_config():
    cfg = compose_config(["optimizer=pto_muon", "model=net3"])
    assert cfg.optimizer.param_split == "hidden_matrices"
    assert "param_split" not in compose_config(["optimizer=lion"]).optimizer
    net = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Linear(5, 4), torch.nn.Linear(4, 3))
    optimizer, _ = optimizer_and_schedule(cfg.optimizer, cfg.schedule, net.parameters(), 10)
    muon, rest = optimizer.param_groups
    hidden = [net[0].weight, net[1].weight]  # the classifier head and the biases: AdamW
    assert muon["use_muon"] and [id(p) for p in muon["params"]] == [id(p) for p in hidden]
    assert not rest["use_muon"] and {id(p) for p in rest["params"]} == {
        id(net[0].bias),
        id(net[1].bias),
        id(net[2].weight),
        id(net[2].bias),
    }
    assert rest["lr"] == cfg.optimizer.adamw_lr and muon["lr"] == cfg.optimizer.lr


def test_a_default_no_config_can_hold_is_the_librarys_own_and_a_dtype_is_named():
    def built(node):
        return optimizer_factory(node, 10)([torch.nn.Parameter(torch.ones(2))])

    adopt = compose_config(["optimizer=adopt"]).optimizer
    assert adopt.clip_lambda == "<library default: lambda step: math.pow(step, 0.25)>"
    library = inspect.signature(catalogue()["adopt"]).parameters["clip_lambda"].default
    assert built(adopt).clip_lambda is library
    factor = compose_config(["optimizer=pto_adafactor"]).optimizer
    assert factor.momentum_dtype == "bfloat16"
    assert built(factor).momentum_dtype is torch.bfloat16
    factor.momentum_dtype = "float32"
    assert built(factor).momentum_dtype is torch.float32
    factor.momentum_dtype = "float33"
    with pytest.raises(ConfigError, match="must name a torch dtype"):
        optimizer_factory(factor, 10)
    shift = compose_config(["optimizer=adashift", "optimizer.reduce_func=torch.mean"]).optimizer
    assert built(shift).reduce_func is torch.mean
