"""Training runs end to end: results on disk, determinism, divergence, the tables API."""

import json
import math

import pandas as pd
import pytest
import torch

from conftest import SMALL_RUN, CountingSGD, SlowSGD, compose_config, run_cli, train_in_process
from harness.config.identity import config_hash
from harness.results import PLANNING_FILE, load_curves, load_runs
from harness.training import first_step, preflight
from harness.training.first_step import MIN_TIMED_STEPS, TIMED_STEPS, WARMUP_STEPS
from harness.training.job import Job
from harness.training.run import check, execute

CHOICES = {"model": "net2", "optimizer": "adam", "schedule": "constant", "data": "mnist"}


def run(tmp_path, mnist_dir, *overrides, name="run"):
    cfg = compose_config([f"data.root={mnist_dir}", *SMALL_RUN, *overrides])
    return execute(cfg, tmp_path / name, CHOICES)


def test_smoke_run_on_real_mnist_writes_its_results(tmp_path, mnist_dir):
    record = run(tmp_path, mnist_dir, "optimizer.lr=0.003")
    run_dir = tmp_path / "run"
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"
    assert record["final"]["test_accuracy"] > 0.75  # 60 steps of Adam on net2 learn a lot
    assert record["versions"]["torch"]
    assert record["config"]["optimizer"]["lr"] == 0.003

    curves = pd.read_parquet(run_dir / "metrics.parquet")
    assert list(curves.columns) == ["iteration", "epoch", "time_s", "metric", "value"]
    batch = curves[curves.metric == "batch_loss"]
    assert batch.iteration.tolist() == list(range(5, 61, 5))
    evals = curves[curves.metric == "test_accuracy"]
    assert evals.iteration.tolist() == [0, 20, 40, 60]
    assert evals.epoch.iloc[-1] == pytest.approx(60 / (2000 // 128))
    # The training loss falls, and the initial network is at chance level.
    train_loss = curves[curves.metric == "train_loss"].value.tolist()
    assert train_loss[-1] < train_loss[0] * 0.5
    assert 0.03 < evals.value.iloc[0] < 0.2


def test_same_config_and_seed_give_identical_metrics(tmp_path, mnist_dir):
    run(tmp_path, mnist_dir, "seed=3", name="a")
    run(tmp_path, mnist_dir, "seed=3", name="b")
    run(tmp_path, mnist_dir, "seed=4", name="c")
    a, b, c = (pd.read_parquet(tmp_path / n / "metrics.parquet") for n in "abc")
    # Every column but the measured time is identical, bit for bit.
    pd.testing.assert_frame_equal(a.drop(columns="time_s"), b.drop(columns="time_s"))
    assert not a.value.equals(c.value)
    ja, jb = (json.loads((tmp_path / n / "run.json").read_text()) for n in "ab")
    assert ja["config_hash"] == jb["config_hash"] and ja["final"] == jb["final"]


def test_huge_learning_rate_diverges_as_a_result(tmp_path, mnist_dir):
    record = run(tmp_path, mnist_dir, "optimizer=sgd", "optimizer.lr=1e4", "model=net3")
    assert record["status"] == "diverged"
    assert record["diverged_at"] is not None and record["diverged_at"] < 60
    runs = load_runs(tmp_path)
    assert runs.status.tolist() == ["diverged"]


def test_epochs_instead_of_iterations(tmp_path, mnist_dir):
    record = run(
        tmp_path, mnist_dir, "train.iterations=null", "train.epochs=2", "train.batch_size=500"
    )
    assert record["iterations"] == 2 * (2000 // 500) and record["epochs"] == 2


def test_config_hash_ignores_where_a_run_executes():
    cfg = {
        "seed": 0,
        "device": "cpu",
        "threads": 1,
        "data": {"root": "/a"},
        "train": {"progress": True},
    }
    moved = {
        "seed": 0,
        "device": "cuda",
        "threads": 2,
        "data": {"root": "/b"},
        "train": {"progress": False},
    }
    assert config_hash(cfg) == config_hash(moved)
    assert config_hash(cfg) != config_hash({**cfg, "seed": 1})


def test_load_runs_and_curves(tmp_path, mnist_dir):
    run(tmp_path, mnist_dir, "seed=0", name="sweep/0")
    run(tmp_path, mnist_dir, "seed=1", "optimizer.lr=0.01", name="sweep/1")
    runs = load_runs(tmp_path / "sweep")
    assert len(runs) == 2
    assert runs[["model", "optimizer", "lr", "seed"]].values.tolist() == [
        ["net2", "adam", 0.001, 0],
        ["net2", "adam", 0.01, 1],
    ]
    for column in (
        "batch_size",
        "momentum",
        "status",
        "final_test_accuracy",
        "final_test_loss",
        "final_train_loss",
        "wall_time_s",
        "run_dir",
    ):
        assert column in runs
    curves = load_curves([tmp_path / "sweep"])
    assert set(curves.seed) == {0, 1}
    per_run = curves[curves.metric == "test_accuracy"].groupby("run_dir").size()
    assert per_run.tolist() == [4, 4]
    # The last evaluation in the curves is the run's final metric.
    last = curves[curves.metric == "test_accuracy"].groupby("seed").value.last()
    assert last.tolist() == runs.sort_values("seed").final_test_accuracy.tolist()


@pytest.mark.slow
def test_cli_single_run_writes_under_results(tmp_path, mnist_dir):
    out = tmp_path / "out"
    result = run_cli(
        "model=net1", "optimizer=sgd", *SMALL_RUN, f"hydra.run.dir={out}", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert json.loads((out / "run.json").read_text())["choices"]["model"] == "net1"
    assert "Traceback" not in result.stderr


def forget_preflight(monkeypatch) -> None:
    """As in a new process: no optimizer checked or probed yet."""
    monkeypatch.setattr(preflight, "_OUTCOMES", {check: {} for check in preflight.CHECKS})


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", [CountingSGD, SlowSGD])
def test_a_steps_time_alone_is_measured_in_a_few_of_its_steps_when_they_are_slow(
    mnist_dir, monkeypatch, optimizer
):
    """The first-step check times the optimizer's step alone: TIMED_STEPS steps of a cheap one
    (at most), MIN_TIMED_STEPS of one whose steps take seconds (its check costs a few of its
    steps, not 20)."""
    forget_preflight(monkeypatch)
    if optimizer is CountingSGD:  # its steps take ~1 ms, ~0.1 s on a busy machine: let no
        monkeypatch.setattr(first_step, "CALIBRATION_S", math.inf)  # load decide its count
    target = f"optimizer._target_=conftest.{optimizer.__name__}"
    cfg = compose_config([f"data.root={mnist_dir}", *SMALL_RUN, "optimizer=sgd", target])
    job = Job.of(cfg, "unused")
    optimizer.steps = 0
    check(job)
    checked_and_warm = 1 + WARMUP_STEPS  # the checked step, then the warm-up
    timed = MIN_TIMED_STEPS if optimizer is SlowSGD else TIMED_STEPS
    assert optimizer.steps == checked_and_warm + timed
    (failure, seconds), *_ = preflight.measured()["first_step"].values()
    assert failure is None and seconds >= optimizer.seconds


def test_a_step_stalled_once_by_another_process_does_not_set_the_steps_time(monkeypatch):
    """Steps of 1 ms on a clock of their own, the fifth timed one stalled for 2 s (another
    process had the core): the step's time is 1 ms, not the mean's ~0.4 s."""
    clock = [0.0]
    monkeypatch.setattr(first_step.time, "perf_counter", lambda: clock[0])

    class Members:
        steps = 0

        def step(self, rows):
            self.steps += 1
            clock[0] += 2.0 if self.steps == WARMUP_STEPS + 5 else 0.001

        def failures(self):
            return {}

    members = Members()
    seconds = first_step._seconds_per_step(members, torch.arange(4), torch.device("cpu"))
    assert seconds == pytest.approx(0.001)
    assert members.steps == WARMUP_STEPS + 5  # the stall ran past the calibration's second


@pytest.mark.parametrize("fail_at", [1 + WARMUP_STEPS, 1 + WARMUP_STEPS + 2])
def test_an_optimizer_that_fails_while_its_step_is_timed_passes_the_check_untimed(
    mnist_dir, monkeypatch, fail_at
):
    """Its first step trains (the check passes: training will tell the failure in its run),
    but a failed step is no step to time: in the warm-up or among the timed steps, no time."""
    forget_preflight(monkeypatch)
    target = "optimizer._target_=conftest.FailingSGD"
    overrides = [*SMALL_RUN, "optimizer=sgd", target, f"+optimizer.fail_at={fail_at}"]
    job = Job.of(compose_config([f"data.root={mnist_dir}", *overrides]), "unused")
    check(job)
    ((failure, seconds),) = preflight.measured()["first_step"].values()
    assert failure is None and seconds is None


@pytest.mark.slow
def test_a_resumed_sweep_neither_checks_times_nor_probes_its_optimizers_again(
    tmp_path, monkeypatch
):
    """A sweep keeps its first-step checks, step times and stacking probes in its folder: a
    resume (a new process) adopts them and steps only to train, and its new runs record the
    time measured the first time. Measured on another machine, they are measured again."""
    monkeypatch.setattr(first_step, "CALIBRATION_S", math.inf)  # TIMED_STEPS, whatever the load
    iterations = 20
    sweep_dir = tmp_path / "sweep"
    args = ["-m", *SMALL_RUN, f"train.iterations={iterations}", "optimizer=sgd"]
    args += ["optimizer._target_=conftest.CountingSGD", f"hydra.sweep.dir={sweep_dir}"]
    args += ["sweep.append=true"]  # each invocation adds a seed
    args += ["hydra.launcher.checkpoint_every_s=0"]  # a checkpoint at every log: probed

    def invocation(seeds: str) -> int:
        """The steps a new process takes to run the sweep with these seeds."""
        forget_preflight(monkeypatch)  # as in a new process
        CountingSGD.steps = 0
        result = train_in_process(*args, f"seed={seeds}", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        return CountingSGD.steps

    first = invocation("0")  # checks and times, probes how the optimizer stacks, then trains
    stored = json.loads((sweep_dir / PLANNING_FILE).read_text())
    outcomes = stored["outcomes"]
    assert len(outcomes["first_step"]) == 1  # one optimizer, one model: one check
    assert len(outcomes["stacks"]) == 1  # one config of the optimizer: one stacking probe
    assert len(outcomes["restores"]) == 1  # and one checkpoint probe
    assert first > iterations + 1 + WARMUP_STEPS + TIMED_STEPS  # the probe steps it too
    assert invocation("0,1") == iterations  # seed 1 only trains
    records = [json.loads(p.read_text()) for p in sweep_dir.rglob("run.json")]
    seconds = {r["seed"]: r["step_time_alone_s"] for r in records}
    assert seconds[0] == seconds[1] == outcomes["first_step"][0][1][1]

    # the layout before one table per check (2) is read as it is; in the one before that (1),
    # first steps were keyed without their batch size: checked again, the probes adopted
    earlier = {
        "machine": stored["machine"],
        "first_steps": [[key, *value] for key, value in outcomes["first_step"]],
        "probes": [
            [[check, *key], reason]
            for check in ("stacks", "shares")
            for key, reason in outcomes[check]
        ],
        "restore_probes": outcomes["restores"],
    }
    (sweep_dir / PLANNING_FILE).write_text(json.dumps({**earlier, "format": 2}))
    assert invocation("0,1,2") == iterations
    check_steps = 1 + WARMUP_STEPS + TIMED_STEPS
    (sweep_dir / PLANNING_FILE).write_text(json.dumps({**earlier, "format": 1}))
    assert invocation("0,1,2,3") == iterations + check_steps

    # a batch size of its own: a check of its own (the step costs what its batch costs)
    args.append("train.batch_size=40")
    assert invocation("0") == iterations + check_steps
    stored = json.loads((sweep_dir / PLANNING_FILE).read_text())
    assert len(stored["outcomes"]["first_step"]) == 2
    args.pop()

    stored["machine"]["processor"] = "another processor"
    (sweep_dir / PLANNING_FILE).write_text(json.dumps(stored))
    assert invocation("0,1,2,3,4") == first


@pytest.mark.slow
def test_a_sweep_that_ends_before_its_first_checkpoint_takes_no_restore_probe(
    tmp_path, monkeypatch
):
    """Checked and timed, a sweep of short runs is estimated to end long before a checkpoint
    (every 300 s): its optimizers are not probed for checkpoints; with checkpoints at every log
    point they are."""
    for every_s, probed in (("300", 0), ("0", 1)):
        sweep_dir = tmp_path / f"every_{every_s}"
        forget_preflight(monkeypatch)  # as in a new process
        result = train_in_process(
            "-m",
            *SMALL_RUN,
            "optimizer=adam",
            "seed=0,1",
            f"hydra.launcher.checkpoint_every_s={every_s}",
            f"hydra.sweep.dir={sweep_dir}",
            cwd=tmp_path,
        )
        assert result.returncode == 0, result.stderr
        outcomes = json.loads((sweep_dir / PLANNING_FILE).read_text())["outcomes"]
        assert len(outcomes["first_step"]) == 1 and len(outcomes["restores"]) == probed
