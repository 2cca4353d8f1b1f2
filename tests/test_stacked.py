"""The stacked engine gives the single-run engine's results: exactness, divergence, outputs."""

import copy
import json
import random

import numpy as np
import pandas as pd
import pytest
import torch
from hydra.utils import get_class
from omegaconf import OmegaConf

from conftest import CONF_DIR, compose_config, hydra_context, max_difference, small
from harness.errors import HarnessError
from harness.stacking.functional import StackedModule
from harness.stacking.grouping import refusal, stack_key
from harness.stacking.mlp import StackedMLP
from harness.stacking.stack import execute_group, train_stack
from harness.sweeps.execute import execute_jobs
from harness.training.job import Job
from harness.training.run import execute, prepare

OPTIMIZERS = sorted(p.stem for p in (CONF_DIR / "optimizer").glob("*.yaml"))
SCHEDULES = sorted(p.stem for p in (CONF_DIR / "schedule").glob("*.yaml"))
ACTIVATIONS = ["sigmoid", "relu", "tanh", "gelu", "elu", "leaky_relu", "identity"]
# Learning rates that train without diverging in 100 float64 steps.
LR = {"sgd": 0.1, "momentum": 0.02, "nesterov": 0.02, "adagrad": 0.02, "adadelta": 1.0}


def tuned_hyperparameters(optimizer: str) -> tuple[str, ...]:
    """The hyper-parameters an optimizer class sets itself (see engine.logged_hyperparameters)."""
    target = OmegaConf.load(CONF_DIR / "optimizer" / f"{optimizer}.yaml")._target_
    return getattr(get_class(target), "tuned_hyperparameters", ())


def random_overrides(optimizer: str, rng: random.Random) -> list[str]:
    """A random config of `optimizer`: learning rate, schedule and its optional settings."""
    lr = LR.get(optimizer, 0.002) * rng.choice([0.5, 1.0, 1.5])
    schedule = rng.choice(SCHEDULES)
    if "lr" in tuned_hyperparameters(optimizer):  # it sets its own learning rate: no schedule
        schedule = "constant"
    out = [f"optimizer={optimizer}", f"optimizer.lr={lr:g}", f"schedule={schedule}"]
    if rng.random() < 0.4 and optimizer != "adamw":
        out.append(f"optimizer.weight_decay={rng.choice([1e-4, 1e-3])}")
    if optimizer in ("momentum", "nesterov"):
        out.append(f"optimizer.momentum={rng.choice([0.5, 0.9])}")
    if optimizer in ("adam", "adamw") and rng.random() < 0.5:
        out.append("optimizer.amsgrad=true")
    if optimizer == "rmsprop":
        out += [
            f"optimizer.centered={rng.random() < 0.5}",
            f"optimizer.momentum={rng.choice([0, 0.5])}",
        ]
    if optimizer == "adagrad" and rng.random() < 0.5:
        out.append("optimizer.lr_decay=0.01")
    return out


def train_both(tmp_path, mnist_dir, base, configs):
    """Train `configs` stacked (one group) and one by one; returns both records and metrics."""
    with hydra_context():
        cfgs = [compose_config([f"data.root={mnist_dir}", *base, *c]) for c in configs]
    jobs = [
        Job.of(cfg, tmp_path / f"stacked{i}", {"optimizer": cfg.optimizer._target_})
        for i, cfg in enumerate(cfgs)
    ]
    assert len({stack_key(job) for job in jobs}) == 1 and not any(map(refusal, jobs))
    stacked = execute_group(jobs)
    single = [execute(job.cfg, tmp_path / f"single{i}", job.choices) for i, job in enumerate(jobs)]
    metrics = [
        (
            pd.read_parquet(tmp_path / f"stacked{i}/metrics.parquet"),
            pd.read_parquet(tmp_path / f"single{i}/metrics.parquet"),
        )
        for i in range(len(cfgs))
    ]
    return stacked, single, metrics


@pytest.mark.slow
@pytest.mark.parametrize(("model", "steps"), [("net2", 100), ("mlp", 100), ("lenet", 40)])
def test_float64_stacked_equals_single_for_all_optimizers(tmp_path, mnist_dir, model, steps):
    rng = random.Random(f"float64-{model}")
    arch = ["model=net2"]
    if model == "lenet":  # a convolutional net: stacked through torch.func
        arch = ["model=lenet", "model.channels=[3,4]", "model.hidden=[16]"]
    if model == "mlp":
        arch = [
            "model=mlp",
            "model.hidden=[24,16]",
            f"model.activations=[{rng.choice(ACTIVATIONS)},{rng.choice(ACTIVATIONS)}]",
        ]
    configs = [[*arch, *random_overrides(o, rng)] for o in OPTIMIZERS]
    stacked, single, metrics = train_both(
        tmp_path, mnist_dir, small("float64", steps, 20, 10), configs
    )
    for config, s, r, (a, b) in zip(configs, stacked, single, metrics, strict=True):
        assert s["status"] == r["status"] == "completed", config
        assert max_difference(a, b) <= 1e-10, config
        assert s["config_hash"] == r["config_hash"]


@pytest.mark.slow
@pytest.mark.parametrize("model", ["net2", "lenet"])
def test_seeds_stack_each_with_its_own_data_order_and_equal_alone(tmp_path, mnist_dir, model):
    # 40 steps of batches of 50 from 1,000 images: two epochs, each a permutation per seed.
    # Lion (pytorch-optimizer) is element-wise: its seeds share one instance; LAMB's per-tensor
    # trust ratio is not: each seed steps its own; Adam takes the course's stacked rule on a
    # small model and, on net2 (> 50,000 parameters), torch's fused step: one for its seeds.
    arch = ["model=net2"]
    if model == "lenet":
        arch = ["model=lenet", "model.channels=[3,4]", "model.hidden=[16]"]
    settings = {"adam": "0.002", "lion": "0.0003", "lamb": "0.01"}
    configs = [
        [*arch, f"optimizer={o}", f"optimizer.lr={lr}", f"seed={seed}"]
        for o, lr in settings.items()
        for seed in (1, 2)
    ]
    stacked, single, metrics = train_both(
        tmp_path, mnist_dir, small("float64", 40, 20, 10)[:-1], configs
    )
    for config, s, r, (a, b) in zip(configs, stacked, single, metrics, strict=True):
        assert s["status"] == r["status"] == "completed", config
        assert max_difference(a, b) <= 1e-10, config
    paths = {(c[-3], s["update_path"]) for c, s in zip(configs, stacked, strict=True)}
    assert paths == {
        ("optimizer=adam", "shared_step" if model == "net2" else "stacked_rule"),
        ("optimizer=lion", "shared_step"),
        ("optimizer=lamb", "optimizer_step"),
    }
    # the seeds trained on other batches: their curves differ
    assert max_difference(metrics[2][0], metrics[3][0]) > 1e-3


@pytest.mark.parametrize(
    ("target", "shares"),
    [
        ("torch.optim.Adam", True),
        ("pytorch_optimizer.Lion", True),
        ("pytorch_optimizer.ScheduleFreeAdamW", True),
        ("pytorch_optimizer.Lamb", False),  # per-tensor trust ratio
        ("pytorch_optimizer.Prodigy", False),  # one step size from all parameters
        ("pytorch_optimizer.Adafactor", False),  # relative step from a tensor's RMS
    ],
)
def test_the_sharing_probe_lets_element_wise_optimizers_share_one_instance(target, shares):
    from harness.stacking.probes import sharing_refusal

    reason = sharing_refusal(lambda params: get_class(target)(params))
    assert (reason is None) == shares, reason
    if not shares:
        assert "not element-wise" in reason or "failed on a probe" in reason


@pytest.mark.slow
def test_float32_stacked_equals_single_after_5_steps(tmp_path, mnist_dir):
    rng = random.Random("float32")
    configs = [["model=net3", *random_overrides(o, rng)] for o in OPTIMIZERS]
    _, _, metrics = train_both(tmp_path, mnist_dir, small("float32", 5, 5, 1), configs)
    for config, (a, b) in zip(configs, metrics, strict=True):
        assert max_difference(a, b) <= 1e-5, config


@pytest.mark.slow
def test_the_torch_func_stack_of_mlps_equals_the_hand_written_one(tmp_path, mnist_dir):
    with hydra_context():
        base = [f"data.root={mnist_dir}", "model=net3", *small("float64", 40, 20, 10)]
        cfgs = [compose_config([*base, f"optimizer={o}"]) for o in ("sgd", "adam", "adagrad")]

    def trained(stack_class):
        runs = [prepare(Job.of(cfg, tmp_path)) for cfg in cfgs]
        return [o.recorder.rows for o in train_stack(runs, stack_class=stack_class)]

    for hand, func in zip(trained(StackedMLP), trained(StackedModule), strict=True):
        assert [r[:2] + r[3:4] for r in hand] == [r[:2] + r[3:4] for r in func]
        values = np.array([r[4] for r in hand]) - np.array([r[4] for r in func])
        assert np.abs(values).max() <= 1e-10


def test_a_model_that_cannot_stack_is_refused_and_trains_alone(tmp_path, mnist_dir):
    with hydra_context():
        base = [f"data.root={mnist_dir}", *small("float32", 5, 5, 5)]
        bn = [*base, "model._target_=conftest.BatchNormNet"]
        cfgs = [compose_config([*bn, f"optimizer={o}"]) for o in ("sgd", "adam")]
        lenet = compose_config([*base, "model=lenet"])
    bn_job, lenet_job = Job.of(cfgs[0], tmp_path), Job.of(lenet, tmp_path)
    assert "buffers" in refusal(bn_job)
    assert refusal(lenet_job) is None
    records = execute_jobs([Job.of(cfg, tmp_path / f"bn{i}") for i, cfg in enumerate(cfgs)])
    assert [r["engine"] for r in records] == ["single", "single"]


@pytest.mark.slow
def test_a_diverging_model_does_not_disturb_the_others(tmp_path, mnist_dir):
    configs = [
        ["model=net3", "optimizer=adam"],
        ["model=net3", "optimizer=sgd", "optimizer.lr=1e4"],
        ["model=net3", "optimizer=momentum", "schedule=cosine"],
    ]
    stacked, single, metrics = train_both(tmp_path, mnist_dir, small("float64", 60, 20, 5), configs)
    assert [r["status"] for r in stacked] == ["completed", "diverged", "completed"]
    assert stacked[1]["diverged_at"] == single[1]["diverged_at"] < 60
    for a, b in metrics:  # non-finite at the same points; equal wherever both are finite
        max_difference(a, b)  # same measurements at the same steps
        finite_a, finite_b = np.isfinite(a.value.to_numpy()), np.isfinite(b.value.to_numpy())
        np.testing.assert_array_equal(finite_a, finite_b)
        difference = np.abs(a.value.to_numpy()[finite_a] - b.value.to_numpy()[finite_a])
        assert difference.max(initial=0.0) <= 1e-10
    a, b = metrics[1]
    assert a.iteration.max() == b.iteration.max() == single[1]["diverged_at"]


def test_written_results_have_execute_structure(tmp_path, mnist_dir):
    configs = [["model=net1", "optimizer=sgd"], ["model=net1", "optimizer=adam"]]
    stacked, single, metrics = train_both(tmp_path, mnist_dir, small("float32", 20, 10, 5), configs)
    for s, r in zip(stacked, single, strict=True):
        assert set(s) == set(r) and set(s["final"]) == set(r["final"])
        assert s["config"] == r["config"] and s["choices"] == r["choices"]
        assert s["iterations"] == r["iterations"] and s["epochs"] == r["epochs"]
    on_disk = json.loads((tmp_path / "stacked0" / "run.json").read_text())
    assert on_disk["status"] == "completed" and on_disk["final"] == stacked[0]["final"]
    for a, b in metrics:
        assert list(a.columns) == list(b.columns) and (a.dtypes == b.dtypes).all()
        assert len(a) == len(b)
    # One stack: every model reports the stack's optimisation time.
    assert metrics[0][0].time_s.tolist() == metrics[1][0].time_s.tolist()


def job_of(overrides: list[str]) -> Job:
    return Job.of(compose_config(overrides), "unused")


@pytest.mark.slow
def test_runs_stack_by_architecture_batch_data_and_dtype_not_optimizer_or_seed(mnist_dir):
    with hydra_context():
        base = [f"data.root={mnist_dir}", "model=net2"]
        key = stack_key(job_of(base))
        sgd = [*base, "optimizer=sgd", "optimizer.lr=0.5", "schedule=step"]
        assert stack_key(job_of(sgd)) == key
        assert stack_key(job_of([*base, "train.divergence_factor=3"])) == key
        # seeds stack: each model draws its own data order
        assert stack_key(job_of([*base, "seed=1"])) == key
        for other in (
            "train.batch_size=64",
            "model=net3",
            "data.train_size=500",
            "train.dtype=float64",
        ):
            assert stack_key(job_of([*base, other])) != key, other
        assert refusal(job_of(base)) is None
        assert refusal(job_of([*base, "model._target_=torch.nn.Identity"])) is not None


def test_a_bad_job_fails_the_group_before_anything_is_written(tmp_path, mnist_dir):
    with hydra_context():
        base = [f"data.root={mnist_dir}", *small("float32", 5, 5, 5)]
        good = compose_config([*base, "optimizer=sgd"])
        bad = compose_config([*base, "optimizer=sgd", "train.batch_size=5000"])
    with pytest.raises(HarnessError, match="larger than the training set"):
        execute_group([Job.of(good, tmp_path / "good"), Job.of(bad, tmp_path / "bad")])
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_execute_jobs_in_two_worker_processes(tmp_path, mnist_dir):
    with hydra_context():
        base = [f"data.root={mnist_dir}", *small("float64", 20, 10, 5), "train.engine=stacked"]
        cfgs = [compose_config([*base, f"optimizer={o}"]) for o in ("sgd", "adam", "rmsprop")]
    jobs = [Job.of(cfg, tmp_path / f"w{i}") for i, cfg in enumerate(cfgs)]
    records = execute_jobs(jobs, workers=2, use_workers=True)
    assert [r["config"]["optimizer"]["_target_"] for r in records] == [
        c.optimizer._target_ for c in cfgs
    ]
    for i, cfg in enumerate(cfgs):
        single = execute(cfg, tmp_path / f"s{i}", {})
        a, b = (pd.read_parquet(tmp_path / f"{n}{i}/metrics.parquet") for n in "ws")
        assert max_difference(a, b) <= 1e-10
        assert records[i]["final"] == pytest.approx(single["final"], abs=1e-10)


def test_an_optimizer_that_raises_during_training_fails_alone(tmp_path, mnist_dir):
    failing = ["model=net2", "optimizer=sgd", "optimizer._target_=conftest.FailingSGD"]
    configs = [["model=net2", "optimizer=adam"], failing, ["model=net2", "optimizer=sgd"]]
    stacked, single, metrics = train_both(tmp_path, mnist_dir, small("float64", 30, 10, 5), configs)
    for records in (stacked, single):
        assert [r["status"] for r in records] == ["completed", "failed", "completed"]
        assert records[1]["diverged_at"] == 7
        assert records[1]["error"] == "LinAlgError: the matrix is singular at step 7"
    for a, b in metrics[::2]:  # the others train on, as they would alone
        assert max_difference(a, b) <= 1e-10
    a, b = metrics[1]  # measured up to its last log point before the failure
    assert a.iteration.max() == b.iteration.max() == 5


def test_seeds_of_an_optimizer_torch_fuses_share_one_fused_instance():
    """Three seeds of Adam on a net2-sized MLP (torch's fused step, as each would take in the
    stack alone) share one instance, fused too, also once a seed has left; a step of it is
    each seed's fused step alone."""
    from harness.problems.classification.networks import MLP
    from harness.stacking.member_optimizers import Sharing, StackedOptimizers
    from harness.training.stepping import SHARED_STEP

    def build(params):
        optimizer = torch.optim.Adam(params, lr=0.01)
        return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda t: 1.0)

    models = [
        MLP(784, 10, [100], ["sigmoid"], generator=torch.Generator().manual_seed(s))
        for s in range(3)
    ]
    alone = [copy.deepcopy(m) for m in models]
    own = [torch.optim.Adam(m.parameters(), lr=0.01, fused=True) for m in alone]
    stack = StackedMLP(models)
    stepper = StackedOptimizers(
        stack, [build(list(m.parameters()))[0] for m in models], [Sharing("adam", build)] * 3
    )
    assert stepper.paths() == [SHARED_STEP] * 3
    assert stepper.shared[0].optimizer.param_groups[0]["fused"]
    stack.restack([models[0], models[2]])
    stepper.keep([0, 2])
    assert stepper.shared[0].optimizer.param_groups[0]["fused"]
    generator = torch.Generator().manual_seed(0)
    for position, k in enumerate([0, 2]):
        for p, (_, _, view) in zip(alone[k].parameters(), stack.views(position), strict=True):
            p.grad = torch.randn(p.shape, generator=generator)
            view.copy_(p.grad)
        own[k].step()
    stepper.step()
    for position, k in enumerate([0, 2]):
        for p, (_, data, _) in zip(alone[k].parameters(), stack.views(position), strict=True):
            assert torch.equal(p.detach(), data)


def test_shared_instance_carries_its_state_when_a_seed_leaves_the_stack():
    # Three seeds of one Lion config share an instance; after two steps the second leaves (as
    # a diverged run does): the two that stay go on exactly as each alone with its own Lion.
    from harness.problems.classification.networks import MLP
    from harness.stacking.member_optimizers import Sharing, StackedOptimizers
    from harness.training.stepping import SHARED_STEP

    lion = get_class("pytorch_optimizer.Lion")

    def build(params):
        optimizer = lion(params, lr=0.01, weight_decay=0.1)
        return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda t: 0.9**t)

    def mlp(seed):
        generator = torch.Generator().manual_seed(seed)
        return MLP(6, 3, [5], ["tanh"], generator=generator).double()

    models = [mlp(s) for s in range(3)]
    alone = [copy.deepcopy(m) for m in models]
    own = [build(list(m.parameters())) for m in alone]
    stack = StackedMLP(models)
    sharing = Sharing("one config", build)
    stepper = StackedOptimizers(
        stack, [build(list(m.parameters()))[0] for m in models], [sharing] * 3
    )
    assert stepper.paths() == [SHARED_STEP] * 3
    generator = torch.Generator().manual_seed(0)
    members = [0, 1, 2]
    for step in range(5):
        if step == 2:
            members = [0, 2]
            stack.restack([models[k] for k in members])
            stepper.keep([0, 2])
        for position, k in enumerate(members):
            grads = [
                torch.randn(p.shape, generator=generator, dtype=p.dtype)
                for p in alone[k].parameters()
            ]
            for p, g in zip(alone[k].parameters(), grads, strict=True):
                p.grad = g
            for (_, _, view), g in zip(stack.views(position), grads, strict=True):
                view.copy_(g)
        assert not stepper.step()
        for k in members:
            own[k][0].step()
            own[k][1].step()
    for position, k in enumerate(members):
        for (_, data, _), q in zip(stack.views(position), alone[k].parameters(), strict=True):
            assert torch.allclose(data, q, rtol=0, atol=1e-14)
