"""Bad input: one clear line on stderr, exit status 2, no traceback, nothing that looks like a
result left behind."""

import shutil

import pytest

from conftest import compose_config, hydra_context, run_cli, train_in_process
from harness.errors import ConfigError
from harness.problems.classification.mnist import MNIST_FILES
from harness.training.job import Job
from harness.training.run import check

SMALL = [
    "data.train_size=500",
    "data.val_size=200",
    "data.test_size=100",
    "train.iterations=5",
    "train.eval_every=5",
    "train.log_every=5",
]


@pytest.fixture(scope="module")
def corrupt_mnist(tmp_path_factory, mnist_dir):
    folder = tmp_path_factory.mktemp("corrupt")
    for name in MNIST_FILES:
        shutil.copy(mnist_dir / name, folder / name)
    bad = folder / "train-labels-idx1-ubyte.gz"
    data = bytearray(bad.read_bytes())
    data[200] ^= 0xFF
    bad.write_bytes(bytes(data))
    return folder


CASES = {
    "unknown model": (
        ["model=net9"],
        "valid model options: lenet, mf, mlp, module, ncf, net1, net2, net3",
    ),
    "ratings model without its problem": (["model=mf"], "is a model of ratings: add +problem"),
    "unknown optimizer": (
        ["optimizer=adamm"],
        "valid optimizer options: adadelta, adagrad, adam, adamax, adamw, momentum, nadam, "
        "nesterov, radam, rmsprop, sgd, yellowfin, or one of ",
    ),
    "unknown schedule": (["schedule=linear"], "valid schedule options: constant, cosine"),
    "zero lr": (["optimizer.lr=0"], "optimizer.lr must be > 0, got 0"),
    "negative lr": (["optimizer.lr=-0.1"], "optimizer.lr must be > 0, got -0.1"),
    "zero batch": (["train.batch_size=0"], "train.batch_size must be >= 1, got 0"),
    "batch larger than data": (
        ["train.batch_size=501"],
        "train.batch_size (501) is larger than the training set (500)",
    ),
    "momentum of one": (
        ["optimizer=momentum", "optimizer.momentum=1.0"],
        "optimizer.momentum must be in [0, 1), got 1.0",
    ),
    "negative momentum": (
        ["optimizer=nesterov", "optimizer.momentum=-0.5"],
        "optimizer.momentum must be in [0, 1)",
    ),
    "train subset too large": (
        ["data.train_size=60001"],
        "data.val_size (200) leaves fewer than data.train_size (60001) of the 60000",
    ),
    "test subset too large": (["data.test_size=10001"], "data.test_size must be at most 10000"),
    "validation too large": (
        ["data.val_size=59600"],
        "data.val_size (59600) leaves fewer than data.train_size (500) of the 60000 training",
    ),
    "negative validation": (["data.val_size=-1"], "data.val_size must be >= 0, got -1"),
    "missing folder": (["data.root=/no/such/folder"], "data.root=/no/such/folder is not a folder"),
    "lr of the wrong type": (["optimizer.lr=fast"], "optimizer.lr must be a number, got 'fast'"),
    "a number given as text": (
        ["optimizer.eps='1e-06'"],
        "optimizer.eps is the text '1e-06', not a number: write it without quotes",
    ),
    "an optimizer class that does not exist": (
        ["optimizer._target_=torch.optim.Adamm"],
        "optimizer._target_=torch.optim.Adamm names nothing that can be imported "
        "(harness-optimizers lists the optimizers by name)",
    ),
    "an optimizer in a package that is not installed": (
        ["optimizer._target_=heavyball_nightly.Foo"],
        "optimizer._target_=heavyball_nightly.Foo names nothing that can be imported",
    ),
    "a catalogue optimizer its constructor refuses": (
        ["optimizer=muon"],
        "invalid optimizer or schedule setting: Muon only supports 2D parameters",
    ),
    "a schedule for an optimizer without a learning rate": (
        ["optimizer=a2grad", "schedule=cosine"],
        "pytorch_optimizer.optimizer.a2grad.A2Grad sets its own step size (optimizer.lr=null): "
        "use schedule=constant",
    ),
    "an unknown parameter split": (
        ["optimizer=pto_muon", "optimizer.param_split=embeddings"],
        "optimizer.param_split must be hidden_matrices or null, got 'embeddings'",
    ),
    "a catalogue optimizer's argument without a default": (
        ["optimizer=bsam"],
        "optimizer.num_data has no default in pytorch_optimizer.optimizer.sam.BSAM",
    ),
    "an optimizer that needs sparse gradients": (
        ["optimizer=sparseadam"],
        "optimizer torch.optim.sparse_adam.SparseAdam fails on its first step or evaluation here "
        "(RuntimeError: SparseAdam does not support dense gradients",
    ),
    "an optimizer of 2-D parameters only": (
        ["optimizer=spectralsphere"],
        "SpectralSphere fails on its first step or evaluation here (ValueError: SpectralSphere "
        "only supports 2D parameters)",
    ),
    "an optimizer whose eval() fails before a step": (
        ["optimizer=splus"],
        "SPlus fails on its first step or evaluation here (KeyError: 'ema')",
    ),
    "batch of the wrong type": (
        ["train.batch_size=1.5"],
        "train.batch_size must be an integer, got 1.5",
    ),
    "unknown key": (["train.batchsize=3"], "Could not override 'train.batchsize'"),
    "invalid beta": (
        ["optimizer.betas=[1.5,0.9]"],
        "invalid optimizer or schedule setting: Invalid beta parameter",
    ),
}


# Where each kind of error starts (Hydra's composition, a config check, the data, the
# optimizer's first step): these also run as a real process, as a user runs them.
IN_A_PROCESS = ("unknown model", "zero lr", "missing folder", "an optimizer of 2-D parameters only")


@pytest.mark.slow
@pytest.mark.parametrize(
    "case,run", [(case, train_in_process) for case in CASES] + [(c, run_cli) for c in IN_A_PROCESS]
)
def test_bad_input_is_one_line(case, run, tmp_path):
    overrides, expected = CASES[case]
    out = tmp_path / "run"
    result = run(*SMALL, *overrides, f"hydra.run.dir={out}", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("harness-train: error: ")
    assert expected in lines[0]
    assert not out.exists()  # nothing that looks like a result


@pytest.mark.slow
def test_corrupt_file_is_named(tmp_path, corrupt_mnist):
    out = tmp_path / "run"
    result = run_cli(*SMALL, f"data.root={corrupt_mnist}", f"hydra.run.dir={out}", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "train-labels-idx1-ubyte.gz has the wrong md5" in result.stderr
    assert not out.exists()


SWEEP_CASES = {
    "bad value in one job": (["optimizer.lr=0.1,-1"], "optimizer.lr must be > 0, got -1"),
    "batch too large in one job": (
        ["train.batch_size=50,501"],
        "train.batch_size (501) is larger than the training set (500)",
    ),
    "unknown option in one job": (["optimizer=sgd,adamm"], "no config 'optimizer/adamm'"),
    "an optimizer failing its first step in one job": (
        ["optimizer=adam,sparseadam"],
        "SparseAdam fails on its first step or evaluation here",
    ),
    "validation too large in one job": (
        ["data.val_size=100,59600"],
        "data.val_size (59600) leaves fewer than data.train_size (500)",
    ),
    "tuning budget of 0": (
        ["experiment=course_tune", "model=net1", "optimizer=sgd", "tune.budget=0"],
        "tune.budget (trials per combination) must be an integer >= 1, got 0",
    ),
    "search space with a negative bound": (
        [
            "experiment=course_tune",
            "model=net1",
            "optimizer=sgd",
            "tune.space.default={optimizer.lr:'tag(log, interval(-1.0, 3.0))'}",
        ],
        "a log-scale interval needs bounds > 0",
    ),
    "search range on the command line with a negative bound": (
        [
            "experiment=course_tune",
            "model=net1",
            "optimizer=sgd",
            "optimizer.lr=tag(log, interval(-1.0, 3.0))",
        ],
        "a log-scale interval needs bounds > 0",
    ),
    "search range in a grid sweep": (
        ["optimizer.lr=interval(0.1, 1.0)"],
        "interval(...) is a range to search, not a grid axis",
    ),
    "Optuna study with a budget of 0": (
        ["experiment=tune_tpe", "model=net1", "optimizer=sgd", "tune.budget=0"],
        "tune.budget (trials per combination) must be an integer >= 1, got 0",
    ),
    "Optuna study with no trials": (
        ["experiment=tune_tpe", "model=net1", "optimizer=sgd", "hydra.sweeper.n_trials=0"],
        "hydra.sweeper.n_trials must be an integer >= 1, got 0",
    ),
    "tuning study without validation data": (
        ["experiment=course_tune", "model=net1", "optimizer=sgd", "data.val_size=0"],
        "a tuning study chooses on validation data: set data.val_size > 0",
    ),
    "Optuna study without validation data": (
        ["experiment=tune_tpe", "model=net1", "optimizer=sgd", "data.val_size=0"],
        "a tuning study chooses on validation data: set data.val_size > 0",
    ),
    "unknown search method": (
        ["experiment=course_tune", "model=net1", "optimizer=sgd", "tune.method=bayes"],
        "tune.method must be one of random, grid, shortlist, got 'bayes'",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize(
    "case,run",
    [(case, train_in_process) for case in SWEEP_CASES] + [("bad value in one job", run_cli)],
)
def test_bad_input_in_a_sweep_is_one_line_and_writes_nothing(case, run, tmp_path):
    overrides, expected = SWEEP_CASES[case]
    folder = tmp_path / "sweep"
    result = run("-m", *SMALL, *overrides, f"hydra.sweep.dir={folder}", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("harness-train: error: "), result.stderr
    assert expected in lines[0]
    assert not folder.exists()


@pytest.mark.slow
def test_bad_input_leaves_an_existing_sweep_as_it_was(tmp_path):
    folder = tmp_path / "sweep"
    first = run_cli("-m", *SMALL, "optimizer.lr=0.1", f"hydra.sweep.dir={folder}", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    bad = ["optimizer.lr=0.1,-1", "sweep.append=true"]
    result = run_cli("-m", *SMALL, *bad, f"hydra.sweep.dir={folder}", cwd=tmp_path)
    assert result.returncode == 2 and "optimizer.lr must be > 0" in result.stderr
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before


def test_a_first_step_that_asks_for_more_memory_than_the_machine_has_is_refused(mnist_dir):
    """As Kron on net2 (25 GB): refused in one line, where the kernel would kill the process."""

    with hydra_context():
        cfg = compose_config(
            [
                f"data.root={mnist_dir}",
                *SMALL,
                "optimizer=sgd",
                "optimizer._target_=conftest.GreedySGD",
            ]
        )
    with pytest.raises(ConfigError) as refused:
        check(Job.of(cfg, "unused"))
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("optimizer conftest.GreedySGD fails on its first step")
    assert "allocate" in message or "MemoryError" in message
