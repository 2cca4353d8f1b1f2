"""The default sweep path: Hydra-equal job configs, engines chosen per run, optimizers and models
that cannot stack, worker processes only for large sweeps, data shared with them."""

import concurrent.futures
import logging
import os

import pandas as pd
import pytest
import torch
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import OmegaConf

from conftest import CONF_DIR, compose_config, hydra_context, max_difference, run_cli, small
from harness.errors import HarnessError
from harness.problems.classification.mnist import load_mnist
from harness.problems.classification.networks import MLP
from harness.stacking.grouping import refusal
from harness.stacking.stack import execute_group
from harness.sweeps import plan as planning
from harness.sweeps.compose import SweepComposer
from harness.sweeps.execute import execute_jobs
from harness.sweeps.jobs import sweep_jobs
from harness.sweeps.plan import WORKER_THRESHOLD, estimated_work
from harness.training import job as datasets
from harness.training.job import Job
from harness.training.run import check as run_check
from harness.training.run import execute


class HeavyBall(torch.optim.Optimizer):
    """Momentum SGD from outside torch.optim that updates its parameters in place. It takes the
    keys of conf/optimizer/momentum.yaml."""

    def __init__(self, params, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):  # noqa: ANN001
        super().__init__(params, {"lr": lr, "momentum": momentum, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001, ANN201
        for group in self.param_groups:
            for p in group["params"]:
                g = p.grad.add(p, alpha=group["weight_decay"])
                if "buffer" not in self.state[p]:
                    self.state[p]["buffer"] = g.clone()
                else:
                    self.state[p]["buffer"].mul_(group["momentum"]).add_(g)
                p.add_(self.state[p]["buffer"], alpha=-group["lr"])


class Rebinding(HeavyBall):
    """The same update, written as `p.data = new tensor`: its parameters stop being views."""

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001, ANN201
        for group in self.param_groups:
            for p in group["params"]:
                p.data = p.data - group["lr"] * p.grad


class LateRebinding(HeavyBall):
    """In place for two steps (it passes the probe), then rebinding."""

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001, ANN201
        self.steps = getattr(self, "steps", 0) + 1
        return (super().step if self.steps <= 2 else Rebinding.step.__get__(self))()


class OtherMLP(MLP):
    """An MLP under another class name: it stacks through torch.func, not the hand-written path."""


def counting_mnist(**kwargs):  # noqa: ANN003, ANN201
    """load_mnist, noting each call in the file $COUNT_LOADS (any process)."""
    with open(os.environ["COUNT_LOADS"], "a") as log:
        log.write(f"{os.getpid()}\n")
    return load_mnist(**kwargs)


def configs(mnist_dir, *variants, base=("model=net2",)):
    with hydra_context():
        return [
            compose_config([f"data.root={mnist_dir}", *small("float64", 40, 20, 10), *base, *v])
            for v in variants
        ]


@pytest.mark.slow
def test_composer_gives_hydras_configs(tmp_path):
    """Every job of a sweep with group, value, add, delete, list and Hydra overrides."""
    overrides = [
        "model=net1,mlp",
        "optimizer=sgd,adam",
        "optimizer.lr=0.1,0.01",
        "model.hidden=[10],[20,10]",
        "+train.note=a,b",
        "~sweep.append",
        "experiment=smoke",
        "+hydra.job.env_set.SOME_VAR=1",
        f"hydra.sweep.dir={tmp_path}",
    ]
    with hydra_context():
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration("config", overrides, RunMode.MULTIRUN)
        composer = SweepComposer(loader, master)
        jobs = sweep_jobs(master)
        assert len(jobs) == 64  # 2**6: the smoke study's seed axis and five of the command line
        for job in jobs:
            expected = OmegaConf.to_container(loader.load_sweep_config(master, job))
            assert OmegaConf.to_container(composer.compose(job)) == expected, job
        assert len(composer.templates) == 4  # one per model x optimizer


def test_third_party_optimizer_trains_exactly_in_a_stack(tmp_path, mnist_dir):
    target = "optimizer._target_=test_launcher.HeavyBall"
    cfgs = configs(
        mnist_dir,
        ["optimizer=momentum", target, "optimizer.lr=0.05"],
        ["optimizer=momentum", target, "optimizer.lr=0.02", "optimizer.weight_decay=0.001"],
        ["optimizer=rmsprop"],
    )
    assert all(refusal(Job.of(cfg, tmp_path)) is None for cfg in cfgs)
    stacked = execute_group([Job.of(cfg, tmp_path / f"stacked{i}") for i, cfg in enumerate(cfgs)])
    for i, (cfg, record) in enumerate(zip(cfgs, stacked, strict=True)):
        single = execute(cfg, tmp_path / f"single{i}", {})
        a, b = (
            pd.read_parquet(tmp_path / f"{n}{i}/metrics.parquet") for n in ("stacked", "single")
        )
        assert max_difference(a, b) <= 1e-10
        assert record["engine"] == "stacked" and single["engine"] == "single"
    assert [r["update_path"] for r in stacked] == [
        "optimizer_step",
        "optimizer_step",
        "stacked_rule",
    ]


def test_an_optimizer_that_replaces_its_tensors_is_refused_a_stack(tmp_path, mnist_dir, caplog):
    target = "optimizer._target_=test_launcher.Rebinding"
    cfgs = configs(mnist_dir, ["optimizer=momentum", target], ["optimizer=momentum", target])
    reason = refusal(Job.of(cfgs[0], tmp_path))
    assert reason is not None and "replaces its parameters' tensors" in reason
    # Trained anyway: each with the single-run engine, and the log says why.
    with caplog.at_level(logging.INFO, logger="harness"):
        records = execute_jobs([Job.of(c, tmp_path / str(i)) for i, c in enumerate(cfgs)])
    assert [r["engine"] for r in records] == ["single", "single"]
    assert "2 run(s) cannot stack, optimizer test_launcher.Rebinding" in caplog.text
    # One that passes the probe and rebinds later is caught then, before anything is written.
    late = ["optimizer=momentum", "optimizer._target_=test_launcher.LateRebinding"]
    cfgs = configs(mnist_dir, late, late)
    with pytest.raises(HarnessError, match="LateRebinding.step\\(\\) replaced its parameters"):
        execute_group([Job.of(c, tmp_path / f"late{i}") for i, c in enumerate(cfgs)])
    assert not list(tmp_path.glob("late*"))


def test_a_model_that_cannot_stack_says_so(tmp_path, mnist_dir, caplog):
    cfgs = configs(
        mnist_dir,
        ["model._target_=conftest.BatchNormNet", "optimizer=sgd"],
        ["model._target_=conftest.BatchNormNet", "optimizer=adam"],
        ["model._target_=test_launcher.OtherMLP", "optimizer=sgd"],
        ["model._target_=test_launcher.OtherMLP", "optimizer=adam"],
    )
    with caplog.at_level(logging.INFO, logger="harness"):
        records = execute_jobs([Job.of(c, tmp_path / str(i)) for i, c in enumerate(cfgs)])
    # Any model without buffers stacks (torch.func); the batch-norm statistics do not.
    assert [r["engine"] for r in records] == ["single", "single", "stacked", "stacked"]
    assert "its model conftest.BatchNormNet: it has buffers" in caplog.text


def test_engines(tmp_path, mnist_dir):
    """auto stacks runs that group and trains a run alone in its group by itself; stacked makes
    a stack of one too; single never stacks."""
    cfgs = configs(
        mnist_dir,
        ["optimizer=sgd"],
        ["optimizer=adam"],
        ["optimizer=sgd", "train.batch_size=64"],  # alone in its group
        ["optimizer=sgd", "train.batch_size=32", "train.engine=stacked"],  # alone too
        ["optimizer=adam", "train.engine=single"],
    )
    records = execute_jobs([Job.of(c, tmp_path / str(i)) for i, c in enumerate(cfgs)])
    assert [r["engine"] for r in records] == ["stacked", "stacked", "single", "stacked", "single"]


def test_small_sweeps_train_without_worker_processes(tmp_path, mnist_dir, monkeypatch):
    cfgs = configs(mnist_dir, ["optimizer=sgd"], ["optimizer=adam"])
    assert sum(estimated_work(Job.of(c, "unused")) for c in cfgs) < WORKER_THRESHOLD
    with hydra_context():
        course = compose_config(["experiment=course", f"data.root={mnist_dir}"])
    assert (
        27 * estimated_work(Job.of(course, "unused")) > WORKER_THRESHOLD
    )  # one seed of the course study

    def no_workers(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("a small sweep started worker processes")

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", no_workers)
    records = execute_jobs([Job.of(c, tmp_path / str(i)) for i, c in enumerate(cfgs)], workers=2)
    assert [r["engine"] for r in records] == ["stacked", "stacked"]


@pytest.mark.slow
def test_workers_get_the_data_without_loading_it_again(tmp_path, mnist_dir, monkeypatch):
    loads = tmp_path / "loads.txt"
    monkeypatch.setenv("COUNT_LOADS", str(loads))
    cfgs = configs(
        mnist_dir,
        *[
            [f"optimizer={o}", "data._target_=test_launcher.counting_mnist"]
            for o in ("sgd", "adam")
        ],
    )
    datasets._DATA.clear()
    records = execute_jobs(
        [Job.of(c, tmp_path / str(i)) for i, c in enumerate(cfgs)], workers=2, use_workers=True
    )
    assert len(records) == 2 and loads.read_text().split() == [str(os.getpid())]
    for i, cfg in enumerate(cfgs):  # and they train as they would here
        single = execute(cfg, tmp_path / f"single{i}", {})
        assert records[i]["final"] == pytest.approx(single["final"], abs=1e-10)


@pytest.mark.slow
def test_help_says_what_a_sweep_does():
    result = run_cli("--help", cwd=CONF_DIR)
    assert result.returncode == 0
    assert "A sweep trains by the fastest exact path by default" in result.stdout


@pytest.mark.slow
def test_stacks_are_dealt_by_what_their_runs_cost_and_bounded_in_seconds(mnist_dir, monkeypatch):
    """An optimizer's step costs 100x more in some than in others: a group's sub-stacks are
    dealt to near-equal estimated seconds (a run's steps times its step alone, as the check
    timed it), and `max_stack_s` bounds a stack's; a run whose cost is unknown counts one."""
    lrs = [round(0.01 * (i + 1), 2) for i in range(10)]
    cfgs = configs(mnist_dir, *[["optimizer=sgd", f"optimizer.lr={lr}"] for lr in lrs])
    jobs = [Job.of(c, "unused") for c in cfgs]
    run_check(jobs[0])  # the check times the step: a run's cost is known
    step = planning.checked_step_time(jobs[0])
    assert planning.estimated_seconds(jobs[0]) == step * jobs[0].cfg.train.iterations > 0

    costs = {lr: 10.0 if lr == lrs[3] else 1.0 for lr in lrs}  # one run 10x costlier
    monkeypatch.setattr(planning, "estimated_seconds", lambda job: costs[job.cfg.optimizer.lr])

    def stacks(**bounds: float) -> list[list[int]]:
        tasks = planning.plan(jobs, parts=2, **bounds)
        assert all(t.stacked for t in tasks)
        assert sorted(i for t in tasks for i in t.jobs) == list(range(10))
        return sorted((t.jobs for t in tasks), key=len)

    # two workers: the costly run in one stack, the nine others in the other (10 s and 9 s)
    assert stacks() == [[3], [0, 1, 2, 4, 5, 6, 7, 8, 9]]
    # at most 5 s a stack: 19 s in four; the costly run, over the bound alone, has no company
    assert stacks(max_stack_s=5) == [[3], [0, 4, 7], [1, 5, 8], [2, 6, 9]]
    # at most 6 models: the bound on models holds as well
    assert [len(s) for s in stacks(max_stack=6)] == [4, 6]
    # costs unknown: every run counts one (two stacks of five)
    monkeypatch.setattr(planning, "estimated_seconds", lambda job: None)
    assert [len(s) for s in stacks(max_stack_s=5)] == [5, 5]
