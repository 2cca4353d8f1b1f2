"""Every shipped config composes and builds: model x optimizer x schedule (in pairs)."""

import math

import pytest
import torch
from hydra.utils import instantiate

from conftest import CONF_DIR, compose_config, hydra_context
from harness.config.class_paths import build
from harness.config.validate import validate_run
from harness.errors import ConfigError
from harness.problems.classification.networks import lenet_multiply_adds
from harness.training.building import build_optimizer
from harness.training.job import Job


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


MODELS, OPTIMIZERS, SCHEDULES = options("model"), options("optimizer"), options("schedule")
# The models of the classification problem (the others are the ratings problem's, test_ratings).
MLPS = ["mlp", "net1", "net2", "net3"]
NETS = ["lenet", *MLPS]


def test_all_groups_are_present():
    assert MODELS == ["lenet", "mf", "mlp", "module", "ncf", "net1", "net2", "net3"]
    assert options("problem") == ["ratings"]  # classification: no problem node (the default)
    assert (
        sorted(
            [
                "sgd",
                "momentum",
                "nesterov",
                "adagrad",
                "adadelta",
                "rmsprop",
                "adam",
                "adamax",
                "nadam",
                "adamw",
                "radam",
                "yellowfin",
            ]
        )
        == OPTIMIZERS
    )
    assert SCHEDULES == ["constant", "cosine", "exponential", "step", "warmup_cosine"]


@pytest.mark.parametrize("model", MLPS)
def test_model_builds_the_course_architecture(model):
    cfg = compose_config([f"model={model}"])
    net = instantiate(cfg.model, in_features=784, num_classes=10, _convert_="all")
    widths = [layer.out_features for layer in net.layers]
    expected = {"net1": [10], "net2": [100, 10], "net3": [300, 100, 50, 10], "mlp": [128, 128, 10]}
    assert widths == expected[model]
    expected_acts = {
        "net1": [],
        "net2": ["sigmoid"],
        "net3": ["sigmoid", "relu", "sigmoid"],
        "mlp": ["relu", "relu"],
    }
    assert net.activations == expected_acts[model]


def test_lenet_builds_its_layers_and_counts_its_work():
    cfg = compose_config(["model=lenet"])
    net = instantiate(cfg.model, in_features=784, num_classes=10, _convert_="all")
    assert (net.conv1.out_channels, net.conv2.out_channels) == (6, 16)
    assert [layer.out_features for layer in net.layers] == [120, 84, 10]
    assert net(torch.zeros(3, 784)).shape == (3, 10)
    # 28x28x6x25 + 10x10x16x6x25 + 400x120 + 120x84 + 84x10 multiply-adds a forward pass
    assert lenet_multiply_adds(784, 10, (6, 16), (120, 84)) == 416_520
    with pytest.raises(ConfigError, match="square images"):
        build(cfg.model, in_features=780, num_classes=10)


@pytest.mark.slow
def test_every_model_optimizer_schedule_composes_and_builds():
    """Every net with every optimizer, and every optimizer with every schedule. The groups share
    no keys (no file interpolates another group's values: checked here), so the pairs cover
    the product model x optimizer x schedule at a fifth of its compositions."""
    for group in ("model", "optimizer", "schedule"):
        for path in (CONF_DIR / group).glob("*.yaml"):
            assert "${" not in path.read_text(), f"{path} refers to another group"
    combos = [(model, optimizer, "constant") for model in NETS for optimizer in OPTIMIZERS]
    combos += [("net1", optimizer, schedule) for optimizer in OPTIMIZERS for schedule in SCHEDULES]
    with hydra_context():
        for model, optimizer, schedule in combos:
            overrides = [f"model={model}", f"optimizer={optimizer}", f"schedule={schedule}"]
            cfg = compose_config(overrides, return_hydra_config=True)
            assert cfg.hydra.runtime.choices.optimizer == optimizer  # names the run in tables
            if optimizer == "yellowfin" and schedule != "constant":
                # It sets its own learning rate: a schedule is refused (test_yellowfin.py).
                with pytest.raises(ConfigError, match="use schedule=constant"):
                    validate_run(cfg, Job.of(cfg, "unused").problem)
                continue
            validate_run(cfg, Job.of(cfg, "unused").problem)
            # The models are built in their own test; a small layer keeps this product fast.
            net = torch.nn.Linear(3, 2)
            opt, sched = build_optimizer(Job.of(cfg, "unused"), net, iterations=100)
            # the schedule starts from the configured rate (a warm-up from a share of it)
            assert opt.param_groups[0]["initial_lr"] == pytest.approx(cfg.optimizer.lr)
            net(torch.zeros(2, 3)).sum().backward()
            opt.step()
            sched.step()


@pytest.mark.parametrize(
    "optimizer,cls,extra",
    [
        ("sgd", torch.optim.SGD, {"momentum": 0.0, "nesterov": False}),
        ("momentum", torch.optim.SGD, {"momentum": 0.9, "nesterov": False}),
        ("nesterov", torch.optim.SGD, {"momentum": 0.9, "nesterov": True}),
        ("adadelta", torch.optim.Adadelta, {"rho": 0.9}),
        ("nadam", torch.optim.NAdam, {}),
    ],
)
def test_optimizer_files_state_their_hyperparameters(optimizer, cls, extra):
    cfg = compose_config([f"optimizer={optimizer}"])
    net = torch.nn.Linear(2, 2)
    opt, _ = build_optimizer(Job.of(cfg, "unused"), net, iterations=10)
    assert type(opt) is cls
    for key, value in extra.items():
        assert opt.defaults[key] == value


def test_step_schedule_divides_by_ten_twice():
    cfg = compose_config(["schedule=step", "schedule.milestones=[3,5]", "optimizer=sgd"])
    opt, sched = build_optimizer(Job.of(cfg, "unused"), torch.nn.Linear(2, 2), iterations=10)
    lrs = []
    for _ in range(7):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == pytest.approx([0.1, 0.1, 0.1, 0.01, 0.01, 0.001, 0.001])


def test_cosine_schedule_spans_the_run():
    cfg = compose_config(["schedule=cosine", "optimizer=sgd"])
    opt, sched = build_optimizer(Job.of(cfg, "unused"), torch.nn.Linear(2, 2), iterations=10)
    for _ in range(10):
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)


def test_warmup_cosine_warms_up_then_decays_to_zero_and_its_state_round_trips():
    cfg = compose_config(["schedule=warmup_cosine", "schedule.warmup=0.1", "optimizer=sgd"])
    opt, sched = build_optimizer(Job.of(cfg, "unused"), torch.nn.Linear(2, 2), iterations=100)
    lrs = []
    for _ in range(100):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    peak = cfg.optimizer.lr
    assert lrs[0] == pytest.approx(peak / 11) and lrs[9] == pytest.approx(peak * 10 / 11)
    assert lrs[10] == pytest.approx(peak) and lrs[55] == pytest.approx(peak / 2)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:], strict=False))
    assert lrs[-1] == pytest.approx(peak * 0.5 * (1 - math.cos(math.pi / 90)))
    assert opt.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)  # after the last step
    # a checkpoint's schedule state holds where it was (a stack goes on from there)
    again, resumed = build_optimizer(Job.of(cfg, "unused"), torch.nn.Linear(2, 2), iterations=100)
    resumed.load_state_dict(sched.state_dict())
    assert resumed.lr_lambdas[0].__dict__ == sched.lr_lambdas[0].__dict__
    bad = compose_config(["schedule=warmup_cosine", "schedule.warmup=1.5", "optimizer=sgd"])
    with pytest.raises(ConfigError, match="schedule.warmup must be a share of the run"):
        build_optimizer(Job.of(bad, "unused"), torch.nn.Linear(2, 2), iterations=100)


def test_data_root_defaults_to_environment(monkeypatch):
    monkeypatch.setenv("HARNESS_DATA_ROOT", "/somewhere/mnist")
    assert compose_config([]).data.root == "/somewhere/mnist"
    monkeypatch.delenv("HARNESS_DATA_ROOT")
    assert compose_config([]).data.root == "data"


@pytest.mark.parametrize(
    "rule,batch,factor", [("none", 512, 1.0), ("linear", 512, 4.0), ("sqrt", 512, 2.0)]
)
def test_batch_size_study_scales_the_learning_rate_by_its_rule(rule, batch, factor):
    with hydra_context():
        overrides = ["experiment=batch_size", "optimizer=adam", f"train.batch_size={batch}"]
        cfg = compose_config([*overrides, f"study.lr_scaling={rule}"])
        assert cfg.optimizer.lr == pytest.approx(0.003 * factor)
        # Equal epochs: 10 passes whatever the batch; about 20 evaluations per run.
        assert cfg.train.epochs == 10 and cfg.train.iterations is None
        assert cfg.train.eval_every == 60
        steps = compose_config([*overrides, "study.budget=steps"])
        assert steps.train.iterations == 4690 and steps.train.epochs is None


def test_an_unknown_scaling_rule_is_named_in_the_error():
    refusal = "ValueError raised while resolving interpolation: lr scaling rule must be one of"
    with hydra_context(), pytest.raises(ValueError, match=refusal):
        cfg = compose_config(["experiment=batch_size", "study.lr_scaling=cubic"])
        validate_run(cfg, Job.of(cfg, "unused").problem)  # reading optimizer.lr resolves it
