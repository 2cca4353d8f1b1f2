"""A user's own optimizer class, by its import path (harness.optimizers.own): its config is its
constructor's signature, the command line's keys over it; bad input is one line; each run
records the versions of what its optimizer comes from (harness.optimizers.versions)."""

import contextlib
import hashlib
import json
import sys
from importlib import metadata

import pandas as pd
import pytest

from conftest import SMALL_RUN, compose_config, run_cli, train_in_process
from harness.config.class_paths import target_object
from harness.errors import ConfigError
from harness.optimizers.catalogue import config_of
from harness.optimizers.own import as_class_choice, config_of_target
from harness.optimizers.versions import class_version, library_versions, optimizer_versions
from harness.training.job import Job
from harness.training.run import check

# As a user writes it: a file in the working directory, not on sys.path.
MYOPT = '''
import torch


class HalfSGD(torch.optim.SGD):
    """SGD at half the rate it is given."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr=lr / 2)


class NeedsLr(torch.optim.SGD):
    def __init__(self, params, lr):
        super().__init__(params, lr=lr)


class NotAnOptimizer:
    def __init__(self, params, lr=0.1):
        self.params = list(params)
'''
VERSIONED = """
import torch

__version__ = "2.5"


class Versioned(torch.optim.SGD):
    pass
"""
HALF_SGD = {"_target_": "myopt.HalfSGD", "_partial_": True, "lr": 0.1}


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory):
    """A working directory with the user's modules; they leave sys.path and sys.modules after."""
    folder = tmp_path_factory.mktemp("user")
    (folder / "myopt.py").write_text(MYOPT)
    (folder / "versionedopt.py").write_text(VERSIONED)
    path = list(sys.path)
    yield folder
    sys.path[:] = path
    for name in ("myopt", "versionedopt"):
        sys.modules.pop(name, None)
    target_object.cache_clear()


def composed(overrides, user_dir, monkeypatch):
    """The optimizer node `harness-train <overrides>` composes, in the user's directory."""
    monkeypatch.chdir(user_dir)
    cfg = compose_config(as_class_choice(overrides))
    return dict(cfg.optimizer)


def test_a_target_is_read_as_the_class_from_its_own_defaults(user_dir, monkeypatch):
    # Not adam's or sgd's keys with the class swapped (betas, momentum: HalfSGD takes neither).
    assert composed(["optimizer._target_=myopt.HalfSGD"], user_dir, monkeypatch) == HALF_SGD
    assert composed(["optimizer=myopt.HalfSGD"], user_dir, monkeypatch) == HALF_SGD
    on_sgd = ["optimizer=sgd", "optimizer._target_=myopt.HalfSGD", "optimizer.lr=0.2"]
    assert composed(on_sgd, user_dir, monkeypatch) == HALF_SGD | {"lr": 0.2}
    assert as_class_choice(["-m", "optimizer._target_=myopt.HalfSGD,versionedopt.Versioned"]) == [
        "-m",
        "optimizer=myopt.HalfSGD,versionedopt.Versioned",
    ]


def test_a_library_class_by_its_path_is_its_catalogue_config():
    """One writer of configs: a class by its import path is spelled as the catalogue spells it
    by name (here with the parameter split Muon needs)."""
    expected = config_of("pto_muon") | {"_target_": "pytorch_optimizer.Muon"}
    assert config_of_target("pytorch_optimizer.Muon") == expected


def test_a_composition_that_swapped_only_the_class_is_refused_by_the_check(
    user_dir, monkeypatch, mnist_dir
):
    """`hydra.compose` with optimizer._target_ alone keeps adam's keys: the run's check names
    them and the way out, before anything trains."""
    monkeypatch.chdir(user_dir)
    cfg = compose_config([f"data.root={mnist_dir}", "optimizer._target_=myopt.HalfSGD"])
    with pytest.raises(ConfigError) as refused:
        check(Job.of(cfg, "unused"))
    assert str(refused.value) == (
        "myopt.HalfSGD takes no argument betas, eps, weight_decay, amsgrad: "
        "optimizer=myopt.HalfSGD builds it from its own defaults"
    )


@pytest.mark.slow
def test_a_users_class_trains_as_it_does_at_its_defaults(user_dir, tmp_path):
    """`harness-train optimizer._target_=myopt.HalfSGD`, a real process in the user's folder,
    trains HalfSGD(params): SGD at 0.05, bit for bit; run.json says which file it was."""
    small = [*SMALL_RUN, "threads=1"]
    own = tmp_path / "own"
    result = run_cli(
        *small, "optimizer._target_=myopt.HalfSGD", f"hydra.run.dir={own}", cwd=user_dir
    )
    assert result.returncode == 0, result.stderr
    sgd = tmp_path / "sgd"
    args = [*small, "optimizer=sgd", "optimizer.lr=0.05", f"hydra.run.dir={sgd}"]
    assert train_in_process(*args, cwd=user_dir).returncode == 0
    a, b = (pd.read_parquet(d / "metrics.parquet").drop(columns="time_s") for d in (own, sgd))
    pd.testing.assert_frame_equal(a, b)
    record = json.loads((own / "run.json").read_text())
    assert record["config"]["optimizer"] == HALF_SGD
    assert record["choices"]["optimizer"] == "myopt.HalfSGD"
    digest = hashlib.sha256((user_dir / "myopt.py").read_bytes()).hexdigest()
    assert record["optimizer_versions"] == library_versions() | {
        "myopt.HalfSGD": f"sha256:{digest}"
    }
    assert record["versions"]["torch"]  # run.json's fields as they were


REFUSALS = {
    "a target that imports nothing": (
        ["optimizer._target_=nosuch.Thing"],
        "optimizer._target_=nosuch.Thing names nothing that can be imported "
        "(harness-optimizers lists the optimizers by name)",
    ),
    "an import path that imports nothing": (
        ["optimizer=nosuch.Thing"],
        "optimizer=nosuch.Thing names nothing that can be imported",
    ),
    "a name neither catalogued nor a file": (
        ["optimizer=nosuchname"],
        "no config 'optimizer/nosuchname'; valid optimizer options: adadelta, adagrad, adam,",
    ),
    "a class that is no optimizer": (
        ["optimizer=myopt.NotAnOptimizer"],
        "optimizer=myopt.NotAnOptimizer is not a torch.optim.Optimizer class",
    ),
    "a target that is no optimizer": (
        ["optimizer._target_=myopt.NotAnOptimizer"],
        "optimizer._target_=myopt.NotAnOptimizer is not a torch.optim.Optimizer class",
    ),
    "an argument without a default left unset": (
        ["optimizer=myopt.NeedsLr"],
        "optimizer.lr has no default in myopt.NeedsLr: set it (optimizer.lr=...)",
    ),
    "one job's class in a sweep": (
        ["-m", "optimizer=myopt.HalfSGD,myopt.NeedsLr"],
        "optimizer.lr has no default in myopt.NeedsLr",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", REFUSALS)
def test_bad_input_about_a_users_class_is_one_line(case, user_dir, tmp_path):
    overrides, expected = REFUSALS[case]
    out = tmp_path / "out"
    folders = [f"hydra.run.dir={out}", f"hydra.sweep.dir={out}"]
    result = train_in_process(*overrides, *SMALL_RUN, *folders, cwd=user_dir)  # -m first
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"harness-train: error: {expected}")
    assert not out.exists()  # refused before anything trains


def test_each_run_records_the_versions_of_its_optimizers_sources(user_dir, monkeypatch):
    config = {
        "optimizer": composed(["optimizer=myopt.HalfSGD"], user_dir, monkeypatch),
        "problem": {"tables": {"_target_": "versionedopt.Versioned"}},
        "schedule": {"_target_": "torch.optim.lr_scheduler.ConstantLR"},
        "model": {"_target_": "harness.problems.classification.networks.MLP"},
    }
    digest = hashlib.sha256((user_dir / "myopt.py").read_bytes()).hexdigest()
    libraries = {"pytorch-optimizer": metadata.version("pytorch-optimizer")}
    libraries["schedulefree"] = metadata.version("schedulefree")
    with contextlib.suppress(metadata.PackageNotFoundError):  # recorded where installed only
        libraries["heavyball"] = metadata.version("heavyball")
    assert optimizer_versions(config) == libraries | {
        "myopt.HalfSGD": f"sha256:{digest}",
        "versionedopt.Versioned": "2.5",  # its module's __version__
    }
    # a library's or torch's class is its package's version, not a file of its own
    assert optimizer_versions({"optimizer": config_of("lion")}) == libraries
    assert class_version(target_object("versionedopt.Versioned")) == "2.5"
