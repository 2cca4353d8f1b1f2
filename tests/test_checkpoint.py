"""Checkpoints (harness.training.checkpoint): a sweep stopped in the middle of its stacks goes on
from where they were, and ends with exactly the results it would have had if never stopped."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
import pytorch_optimizer
import torch

from conftest import MNIST_DIR, FailingSGD, compose_config, hydra_context, run_cli, small
from harness.results import CHECKPOINTS_FOLDER as FOLDER
from harness.results import load_curves
from harness.stacking.stack import execute_group
from harness.sweeps.plan import plan
from harness.training.checkpoint import Checkpoint, saved_tasks, task_checkpoint
from harness.training.job import Job
from harness.training.restore_probe import restore_refusal
from harness.training.run import execute_job

MLP = ["model=mlp", "model.hidden=[6]"]


class Stopped(Exception):
    """The training stopped, as a killed process stops: after a checkpoint was written."""


def stop_after(monkeypatch, step: int) -> None:
    """Checkpoints are saved as usual; training stops right after the one of step `step`."""
    save = Checkpoint.save

    def save_then_stop(self, state):
        save(self, state)
        if state["iteration"] >= step:
            raise Stopped

    monkeypatch.setattr(Checkpoint, "save", save_then_stop)


def jobs_in(folder, cfgs) -> list[Job]:
    return [Job.of(cfg, folder / f"run{i}") for i, cfg in enumerate(cfgs)]


def assert_same_results(folder_a, folder_b, count: int) -> None:
    """The runs' measurements are the same to the last bit (only their times differ)."""
    for i in range(count):
        a = pd.read_parquet(folder_a / f"run{i}" / "metrics.parquet").drop(columns="time_s")
        b = pd.read_parquet(folder_b / f"run{i}" / "metrics.parquet").drop(columns="time_s")
        pd.testing.assert_frame_equal(a, b, check_exact=True)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model", "paths", "lion_lr"),
    [
        (
            [*small("float64", 60, 10, 5), *MLP],
            {"stacked_rule", "shared_step", "optimizer_step"},
            0.2,
        ),
        # 79,510 parameters: torch's fused Adam and SGD update them (state on the device)
        ([*small("float32", 60, 10, 5), "model=net2"], {"torch_fused", "shared_step"}, 0.55),
    ],
    ids=["mlp-float64", "net2-float32"],
)
def test_a_stopped_stack_goes_on_from_its_checkpoint_as_if_never_stopped(
    tmp_path, mnist_dir, monkeypatch, model, paths, lion_lr
):
    """A stack with every update path (stacked rules or torch's fused ones, one instance shared
    by two seeds, an optimizer's own step) and members that diverged before the checkpoint
    (the stack was rebuilt without them: one alone, one of three seeds sharing an instance,
    which was resliced), stopped at step 30 of 60, goes on from there: the same measurements,
    bit for bit, as the stack trained without a stop; run.json says where it went on."""
    members = [["optimizer=adam"], ["optimizer=momentum"], ["optimizer=lion"]]
    members += [["optimizer=lion", "seed=8"], ["optimizer=lion", "optimizer.lr=0.003"]]
    members += [["optimizer=lion", f"optimizer.lr={lion_lr}", f"seed={s}"] for s in (0, 3, 8)]
    members += [["optimizer=adam", "optimizer.lr=50"]]
    with hydra_context():
        cfgs = [compose_config([f"data.root={mnist_dir}", *model, *m]) for m in members]
    straight = execute_group(jobs_in(tmp_path / "straight", cfgs))
    assert paths <= {r["update_path"] for r in straight}
    assert straight[-1]["status"] == "diverged" and straight[-1]["diverged_at"] < 30
    seeds = straight[5:8]  # one of them diverged, two trained on
    assert {r["update_path"] for r in seeds} == {"shared_step"}
    assert sorted(r["status"] for r in seeds) == ["completed", "completed", "diverged"]
    assert all(r["diverged_at"] is None or r["diverged_at"] < 30 for r in seeds)

    with monkeypatch.context() as patched:
        stop_after(patched, 30)
        with pytest.raises(Stopped):
            execute_group(jobs_in(tmp_path / "stopped", cfgs), checkpoint_every_s=0)
    assert not list((tmp_path / "stopped").rglob("run.json"))  # nothing written but the state
    resumed = execute_group(jobs_in(tmp_path / "stopped", cfgs), checkpoint_every_s=0)

    assert_same_results(tmp_path / "straight", tmp_path / "stopped", len(cfgs))
    for a, b in zip(straight, resumed, strict=True):
        assert a["resumed_at"] == [] and b["resumed_at"] == [30]
        keys = ["status", "diverged_at", "update_path"]
        assert [a[key] for key in keys] == [b[key] for key in keys]
    assert not list((tmp_path / "stopped" / FOLDER).iterdir())  # removed once written


@pytest.mark.parametrize(
    "optimizer",
    [
        # draws torch's global random numbers for its masks (here half the weights, drawn
        # again every 10 steps): the random state goes on too
        ["optimizer=spam", "optimizer.update_proj_gap=10", "optimizer.density=0.5"],
        ["optimizer=schedulefree_adamwclosure"],  # a closure; train/eval modes
    ],
    ids=["spam", "schedulefree_adamwclosure"],
)
def test_a_run_trained_alone_goes_on_from_its_checkpoint_as_if_never_stopped(
    tmp_path, mnist_dir, monkeypatch, optimizer
):
    with hydra_context():
        base = [f"data.root={mnist_dir}", *small("float64", 60, 10, 5), *MLP]
        cfg = compose_config([*base, *optimizer])
    execute_job(Job.of(cfg, tmp_path / "straight" / "run0"))
    job = Job.of(cfg, tmp_path / "stopped" / "run0")
    with monkeypatch.context() as patched:
        stop_after(patched, 25)
        with pytest.raises(Stopped):
            execute_job(job, checkpoint_every_s=0)
    record = execute_job(job, checkpoint_every_s=0)
    assert record["resumed_at"] == [25] and record["engine"] == "single"
    assert_same_results(tmp_path / "straight", tmp_path / "stopped", 1)


def test_an_optimizer_that_keeps_state_outside_its_state_dict_trains_without_checkpoints(
    tmp_path, mnist_dir
):
    """FailingSGD counts its steps in an attribute (it fails at step `fail_at`): a run going on
    from a checkpoint would count from 0 again and fail later than it does. The probe sees the
    attribute differ, though the probe's steps are too few to see the failure."""
    assert restore_refusal(lambda params: FailingSGD(params, fail_at=100, lr=0.1)) == (
        "it carries state between steps outside its state_dict()"
    )
    assert restore_refusal(lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9)) is None
    # at a large rate DualAdam's inverse-Adam phase makes NaN on the probe: NaN, not a difference
    assert restore_refusal(lambda params: pytorch_optimizer.DualAdam(params, lr=0.05)) is None
    with hydra_context():
        base = [f"data.root={mnist_dir}", *small("float32", 60, 10, 5), *MLP]
        cfg = compose_config([*base, "optimizer=sgd"])
        failing = compose_config(
            [
                *base,
                "optimizer=sgd",
                "+optimizer.fail_at=100",
                "optimizer._target_=conftest.FailingSGD",
            ]
        )
    assert task_checkpoint([Job.of(failing, tmp_path / "a")], False, 0) is None
    assert task_checkpoint([Job.of(cfg, tmp_path / "a")], False, None) is None  # no interval
    assert task_checkpoint([Job.of(cfg, tmp_path / "a")], False, 0) is not None


def test_runs_that_cannot_save_checkpoints_stack_apart_from_those_that_can(tmp_path, mnist_dir):
    """One run whose optimizer keeps state outside its state_dict() would take the checkpoints
    of every run of its stack (a zoo's DualAdam: 46 others): with checkpoints on, the planner
    stacks it apart; without, it stacks with the rest."""
    with hydra_context():
        base = [f"data.root={mnist_dir}", *small("float32", 60, 10, 5), *MLP, "optimizer=sgd"]
        sgd = [compose_config([*base, f"optimizer.lr={lr}"]) for lr in (0.1, 0.2)]
        failing = compose_config(
            [*base, "+optimizer.fail_at=1000", "optimizer._target_=conftest.FailingSGD"]
        )
    jobs = jobs_in(tmp_path, [*sgd, failing, failing.copy()])
    jobs[3].cfg.seed = 1  # two seeds of one configuration
    assert [t.jobs for t in plan(jobs, parts=1)] == [[0, 1, 2, 3]]
    tasks = plan(jobs, parts=1, checkpoints=True)
    assert sorted(t.jobs for t in tasks) == [[0, 1], [2, 3]] and all(t.stacked for t in tasks)
    saving = [task_checkpoint([jobs[i] for i in t.jobs], True, 0) is not None for t in tasks]
    assert sorted(saving) == [False, True]


def test_a_checkpoint_saved_for_other_configs_is_not_used_and_one_written_is_removed(
    tmp_path, mnist_dir
):
    with hydra_context():
        base = [f"data.root={mnist_dir}", *small("float32", 60, 10, 5), *MLP]
        cfg = compose_config([*base, "optimizer=sgd"])
        other = compose_config([*base, "optimizer=sgd", "optimizer.lr=0.5"])
    job = Job.of(cfg, tmp_path / "run0")
    checkpoint = task_checkpoint([job], False, 0)
    checkpoint.save({"iteration": 20, "members": {}})
    assert saved_tasks([job]) == [([0], False, 20)]
    (task,) = plan([job], parts=1)  # trained as the task it was, 20 steps of it done
    assert (task.jobs, task.stacked, task.trained) == ([0], False, 20)
    assert checkpoint.load()["iteration"] == 20

    changed = Job.of(other, tmp_path / "run0")  # the same folder, another config
    assert saved_tasks([changed]) == []
    assert task_checkpoint([changed], False, 0).load() is None

    # its run written, the checkpoint was not removed (stopped in between): it goes now
    (tmp_path / "run0").mkdir()
    (tmp_path / "run0" / "run.json").write_text("{}")
    another_run = Job.of(cfg, tmp_path / "run1")  # the sweep's other job, still to train
    assert saved_tasks([another_run]) == [] and not list((tmp_path / FOLDER).iterdir())


def test_a_state_saved_without_its_index_gets_it_back_and_saves_cut_short_go(tmp_path, mnist_dir):
    """A task's first save stopped between its two writes: the state is used all the same (it
    holds its index); one that cannot be read, and the partial files of cut writes, go (not
    a recent one: another command may be writing it)."""
    with hydra_context():
        cfg = compose_config([f"data.root={mnist_dir}", *small("float32", 60, 10, 5), *MLP])
    job = Job.of(cfg, tmp_path / "run0")
    checkpoint = task_checkpoint([job], False, 0)
    checkpoint.save({"iteration": 20})
    index = json.loads(checkpoint.index_path.read_text())
    checkpoint.index_path.unlink()
    cut = checkpoint.state_path.with_name(f"{checkpoint.state_path.name}.123.partial")
    cut.write_bytes(b"cut")
    in_progress = checkpoint.index_path.with_name("fedcba9876543210.pt.456.partial")
    in_progress.write_bytes(b"another command's save, still being written")
    hours_ago = time.time() - 2 * 3600
    os.utime(cut, (hours_ago, hours_ago))
    unreadable = tmp_path / FOLDER / "0123456789abcdef.pt"
    unreadable.write_bytes(b"not a checkpoint")

    assert saved_tasks([job]) == [([0], False, 20)]
    assert json.loads(checkpoint.index_path.read_text()) == index
    kept = {checkpoint.state_path, checkpoint.index_path, in_progress}
    assert set((tmp_path / FOLDER).iterdir()) == kept
    assert task_checkpoint([job], False, 0).load() == {"iteration": 20}


def test_a_checkpoint_of_another_layout_or_that_cannot_be_read_is_not_used(tmp_path, mnist_dir):
    """Members in another order or on other update paths (code changed between two sittings,
    a probe that decided otherwise), another engine, or a file cut short: the task starts
    over instead of loading weights into the wrong models, and says why."""
    with hydra_context():
        base = [f"data.root={mnist_dir}", *small("float32", 60, 10, 5), *MLP]
        cfg = compose_config([*base, "optimizer=sgd"])
    job = Job.of(cfg, tmp_path / "run0")
    checkpoint = task_checkpoint([job], False, 0)
    checkpoint.layout = ["run0: stacked_rule"]
    checkpoint.save({"iteration": 20})
    reread = task_checkpoint([job], False, 0)
    reread.layout = ["run0: optimizer_step"]
    assert reread.load() is None
    reread.layout = checkpoint.layout
    assert reread.load() == {"iteration": 20}
    assert saved_tasks([job]) == [([0], False, 20)]
    assert task_checkpoint([job], True, 0).load() is None  # saved by a lone run, not a stack

    checkpoint.state_path.write_bytes(checkpoint.state_path.read_bytes()[:100])  # cut short
    assert reread.load() is None
    checkpoint.index_path.write_text("{")
    assert saved_tasks([job]) == []


def test_a_problem_that_steps_several_optimizers_trains_without_checkpoints(tmp_path):
    """Ratings with sparse embedding tables: SparseAdam for the tables beside Adam for the
    rest, which the probe does not cover."""
    from test_ratings import RATINGS_RUN

    with hydra_context():
        cfg = compose_config([*RATINGS_RUN, "problem.tables=sparse_adam", "optimizer=adam"])
    assert task_checkpoint([Job.of(cfg, tmp_path / "run0")], False, 0) is None


@pytest.mark.slow
@pytest.mark.parametrize(
    "workers",
    [
        pytest.param(False, id="in-process"),
        pytest.param(True, id="workers", marks=pytest.mark.heavy),
    ],
)
def test_a_killed_sweep_goes_on_from_its_checkpoints(tmp_path, workers):
    """SIGKILL to a sweep's process group once a stack has saved a checkpoint past step 125 (of
    300): the same command goes on from it, and the sweep's curves equal those of a sweep never
    stopped, bit for bit; with the stacks trained in this process or in worker processes (as
    a large sweep trains them: their checkpoints are saved there)."""
    overrides = [
        "-m",
        "experiment=smoke",
        "train.iterations=300",
        "train.eval_every=100",
        "hydra.launcher.checkpoint_every_s=0",
        f"hydra.launcher.use_workers={str(workers).lower()}",
    ]
    folder = tmp_path / "sweep"
    cmd = [sys.executable, "-c", "from harness.cli import train; train()", *overrides]
    proc = subprocess.Popen(
        [*cmd, f"hydra.sweep.dir={folder}"],
        cwd=tmp_path,
        env={**os.environ, "HARNESS_DATA_ROOT": str(MNIST_DIR)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )

    saved: dict = {"iteration": 0}  # the index of the latest save seen

    def saved_step() -> int:
        for path in (folder / FOLDER).glob("*.json"):
            with contextlib.suppress(OSError, ValueError):  # replaced while read
                index = json.loads(path.read_text())
                if index["iteration"] > saved["iteration"]:
                    saved.update(index)
        return saved["iteration"]

    deadline = time.monotonic() + 240
    while saved_step() < 125 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert saved_step() >= 125

    resumed = run_cli(*overrides, f"hydra.sweep.dir={folder}", cwd=tmp_path, timeout=900)
    assert resumed.returncode == 0, resumed.stderr
    assert "go on from their checkpoints" in resumed.stdout + resumed.stderr
    assert ("[SpawnProcess" in resumed.stdout + resumed.stderr) == workers
    straight = tmp_path / "straight"
    result = run_cli(*overrides, f"hydra.sweep.dir={straight}", cwd=tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr

    def curves(path):
        found = load_curves(path).drop(columns=["time_s", "run_dir"], errors="ignore")
        return found.sort_values([*found.columns.drop("value")]).reset_index(drop=True)

    pd.testing.assert_frame_equal(curves(folder), curves(straight), check_exact=True)
    resumed_at = [json.loads(p.read_text())["resumed_at"] for p in folder.rglob("run.json")]
    assert any(resumed_at) and len(resumed_at) == 8
    assert not list((folder / FOLDER).iterdir())

    # a checkpoint left as its runs were written (a stop in between), nothing left to train:
    # the command that finds the sweep done removes it
    (folder / FOLDER / "0123456789abcdef.json").write_text(json.dumps(saved))
    again = run_cli(*overrides, f"hydra.sweep.dir={folder}", cwd=tmp_path, timeout=900)
    assert again.returncode == 0, again.stderr
    assert not list((folder / FOLDER).iterdir())
