"""Sweeps: named studies, consolidated tables, resume after a kill, parallel and cluster
launchers, divergence inside a sweep."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import MNIST_DIR, compose_config, hydra_context, run_cli
from harness.errors import ConfigError
from harness.results import SWEEP_FILE, load_curves, load_runs
from harness.sweeps import resume as finished_module
from harness.sweeps.jobs import sweep_jobs, tuning_protocol
from harness.sweeps.progress import Progress, format_seconds
from harness.sweeps.resume import already_finished, write_index

TINY = ["train.iterations=20", "train.eval_every=10", "data.train_size=500", "data.test_size=200"]


def sweep(tmp_path, *overrides, name="sweep"):
    return run_cli("-m", *overrides, f"hydra.sweep.dir={tmp_path / name}", cwd=tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize(
    "experiment,jobs",
    [
        ("smoke", 8),
        ("course", 90),
        ("course_tune", 273),
        ("course_test_selected", 90),
        ("lr_grid", 810),
        ("momentum", 168),
        ("batch_size", 252),
        ("depth", 60),
        ("zoo_decay_tune", 630),
    ],
)
def test_studies_compose_and_expand(experiment, jobs):
    with hydra_context():
        cfg = compose_config([f"experiment={experiment}"], return_hydra_config=True)
        expanded = sweep_jobs(cfg)
        assert len(expanded) == jobs
        assert all(any(o.startswith("seed=") for o in job) for job in expanded)  # seeds an axis
        assert cfg.hydra.sweep.dir == f"results/{experiment}"
        # Every job of the study composes to a valid config.
        for job in expanded[:: max(1, len(expanded) // 12)]:
            compose_config(job)


@pytest.mark.parametrize("experiment", ["zoo_shortlist", "zoo_decay_shortlist"])
def test_a_zoos_shortlist_phase_has_a_protocol_that_runs(experiment):
    """Phase 2 draws nothing: phase 1's search settings (a centred range, rounds beyond an
    edge), which its preset inherits, are switched off, and its protocol checks out."""
    with hydra_context():
        cfg = compose_config([f"experiment={experiment}"], return_hydra_config=True)
    tune, _ = tuning_protocol(cfg)
    assert tune["method"] == "shortlist" and not tune.get("centre") and not tune.get("beyond_edge")


@pytest.mark.slow
def test_smoke_sweep_tables_and_resume(tmp_path):
    result = sweep(tmp_path, "experiment=smoke")
    assert result.returncode == 0, result.stderr
    assert "run 8 of 8" in result.stdout
    folder = tmp_path / "sweep"
    runs = pd.read_parquet(folder / "runs.parquet")
    curves = pd.read_parquet(folder / "curves.parquet")
    assert len(runs) == 8 and runs.config_hash.is_unique
    assert sorted(runs.groupby(["model", "optimizer"]).size().tolist()) == [2, 2, 2, 2]
    # 100 iterations: 20 batch-loss + 20 lr rows, and 5 evaluations x 6 metrics per run (loss
    # and accuracy on the training subset, the validation split and the test set).
    assert curves.groupby("run_dir").size().tolist() == [70] * 8
    # A notebook can plot load_runs / load_curves without reshaping.
    loaded = load_runs(folder)
    assert loaded.final_test_accuracy.between(0.5, 1).all()
    acc = load_curves(folder).query("metric == 'test_accuracy'")
    wide = acc.pivot_table(index="iteration", columns=["model", "optimizer"], values="value")
    assert wide.shape == (5, 4)

    # The same command again resumes: nothing left to run, nothing duplicated.
    again = sweep(tmp_path, "experiment=smoke")
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("skipped: this config already finished") == 8
    assert len(pd.read_parquet(folder / "runs.parquet")) == 8

    # harness-collect on demand gives the same tables.
    (folder / "runs.parquet").unlink()
    collected = subprocess.run(
        [sys.executable, "-c", "from harness.cli import collect_main; collect_main()", str(folder)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "8 runs, 560 curve rows" in collected.stdout
    pd.testing.assert_frame_equal(pd.read_parquet(folder / "runs.parquet"), runs)


@pytest.mark.slow
def test_a_sweep_reuses_what_an_earlier_study_trained_and_trains_only_the_rest(tmp_path):
    first = sweep(tmp_path, *TINY, "optimizer=sgd,adam", "model=net1", name="first")
    assert first.returncode == 0, first.stderr
    earlier = pd.read_parquet(tmp_path / "first" / "runs.parquet")
    for run_json in (tmp_path / "first").rglob("run.json"):  # as committed: its tables alone
        run_json.unlink()
    again = sweep(
        tmp_path, *TINY, "optimizer=sgd,adam,adagrad", "model=net1",
        f"sweep.reuse=[{tmp_path / 'first'}]", name="second",
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("reused: this config finished in") == 2
    assert "run 1 of 1 done" in again.stdout  # adagrad alone trained
    runs = load_runs(tmp_path / "second").set_index("config_hash")
    old = earlier.set_index("config_hash")
    for column in ["final_val_accuracy", "final_test_loss", "iterations", "step_time_alone_s"]:
        pd.testing.assert_series_equal(runs.loc[old.index, column], old[column])
    curves = load_curves(tmp_path / "second")
    assert curves.groupby("optimizer").size().nunique() == 1  # every run has its whole curve
    missing = sweep(tmp_path, *TINY, "model=net1", "sweep.reuse=[nowhere]", name="third")
    assert missing.returncode == 2 and "sweep.reuse: no study folder nowhere" in missing.stderr


@pytest.mark.slow
def test_another_sweep_into_the_same_folder_is_refused_unless_appended(tmp_path):
    assert sweep(tmp_path, *TINY, "optimizer=sgd,adam", "model=net1").returncode == 0
    refused = sweep(tmp_path, *TINY, "optimizer=adagrad", "model=net1")
    assert refused.returncode == 2
    assert refused.stderr.strip().count("\n") == 0 and "holds another sweep" in refused.stderr
    assert len(load_runs(tmp_path / "sweep")) == 2
    added = sweep(tmp_path, *TINY, "optimizer=adagrad", "model=net1", "sweep.append=true")
    assert added.returncode == 0, added.stderr
    assert sorted(load_runs(tmp_path / "sweep").optimizer) == ["adagrad", "adam", "sgd"]
    state = json.loads((tmp_path / "sweep" / SWEEP_FILE).read_text())
    assert len(state["invocations"]) == 2


@pytest.mark.slow
def test_diverging_run_inside_a_sweep(tmp_path):
    result = sweep(tmp_path, *TINY, "model=net3", "optimizer=sgd", "optimizer.lr=0.1,1e4,0.01")
    assert result.returncode == 0, result.stderr
    runs = load_runs(tmp_path / "sweep").set_index("lr")
    assert runs.status.to_dict() == {0.01: "completed", 0.1: "completed", 1e4: "diverged"}


def _start_sweep(overrides: list[str], cwd: Path, stderr: int) -> subprocess.Popen:
    """`harness-train` with `overrides` as a process group of its own (a signal to the group
    reaches its workers too, as Ctrl-C or a kill would)."""
    cmd = [sys.executable, "-c", "from harness.cli import train; train()", *overrides]
    env = {**os.environ, "HARNESS_DATA_ROOT": str(MNIST_DIR)}
    return subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        text=True,
        start_new_session=True,
    )


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["auto", pytest.param("single", marks=pytest.mark.heavy)])
def test_killed_sweep_resumes_every_run_exactly_once(tmp_path, engine):
    overrides = [
        "-m",
        "experiment=smoke",
        "train.iterations=200",  # long enough to kill the sweep between its stacks
        "train.eval_every=100",
        f"train.engine={engine}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    ]
    proc = _start_sweep(overrides, tmp_path, stderr=subprocess.DEVNULL)
    folder, deadline = tmp_path / "sweep", time.monotonic() + 240

    def finished_runs() -> int:
        return len(list(folder.rglob("run.json")))

    while finished_runs() < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # mid-sweep: 2 runs (one stack of 2) have finished
    proc.wait()
    finished = finished_runs()
    assert 2 <= finished < 8
    assert not (tmp_path / "sweep" / "runs.parquet").exists()
    # The interrupted runs left no result, only their Hydra folders.
    assert len(load_runs(tmp_path / "sweep")) == finished

    # A shared 2-core machine can be slow: a generous limit (it bounds a hang, not a speed).
    result = run_cli(*overrides, cwd=tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("skipped: this config already finished") == finished
    runs = pd.read_parquet(tmp_path / "sweep" / "runs.parquet")
    assert len(runs) == 8 and runs.config_hash.is_unique and runs.run_dir.is_unique
    assert (runs.status == "completed").all()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "whole_group"),
    [(signal.SIGINT, True), (signal.SIGTERM, False)],
    ids=["ctrl-c", "sigterm"],
)
def test_ctrl_c_stops_a_sweep_in_one_line_and_keeps_what_finished(tmp_path, signum, whole_group):
    """Ctrl-C (SIGINT to the process group, worker processes included) or SIGTERM to the main
    process alone (`kill`, a scheduler's stop): exit status 128 + the signal, one line that
    says how to resume, no traceback, no worker left running; the runs that finished keep
    their results."""
    overrides = [
        "-m",
        "experiment=smoke",
        "train.iterations=600",
        "train.eval_every=200",
        "hydra.launcher.n_jobs=2",
        "hydra.launcher.use_workers=true",  # small as it is: the workers must stop too
    ]
    # The signal goes once a run has finished; a sweep that ends first (this process polled
    # too slowly beside the workers on a busy machine) tests nothing: it is started again.
    for attempt in range(3):
        folder = tmp_path / f"sweep{attempt}"
        proc = _start_sweep([*overrides, f"hydra.sweep.dir={folder}"], tmp_path, subprocess.PIPE)
        deadline = time.monotonic() + 240
        while not list(folder.rglob("run.json")) and time.monotonic() < deadline:
            time.sleep(0.02)
        if proc.poll() is None:
            break
        proc.communicate()
    else:
        pytest.fail("the sweep finished before the signal in 3 tries")
    if whole_group:
        os.killpg(proc.pid, signum)
    else:
        os.kill(proc.pid, signum)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, stderr
    assert "Traceback" not in stderr
    # a worker's last progress line may reach stderr after the main process's message
    own = [line for line in stderr.strip().splitlines() if not line.startswith("[SpawnProcess")]
    assert own[-1] == (
        "harness-train: interrupted; the runs that finished are kept, and the same command "
        "resumes the rest (from their last checkpoints)"
    )
    deadline = time.monotonic() + 30
    while _group_alive(proc.pid) and time.monotonic() < deadline:  # the workers stopped
        time.sleep(0.1)
    assert not _group_alive(proc.pid)
    assert len(load_runs(folder)) == len(list(folder.rglob("run.json"))) >= 1


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_parallel_joblib_workers_give_the_sequential_results(tmp_path):
    axes = [*TINY, "model=net1,net2", "optimizer=sgd,adam", "seed=0,1", "threads=1"]
    assert sweep(tmp_path, *axes, "train.engine=single", name="sequential").returncode == 0
    result = sweep(
        tmp_path, *axes, "hydra/launcher=parallel", "hydra.launcher.n_jobs=2", name="parallel"
    )
    assert result.returncode == 0, result.stderr
    seq = pd.read_parquet(tmp_path / "sequential" / "runs.parquet").set_index("config_hash")
    par = pd.read_parquet(tmp_path / "parallel" / "runs.parquet").set_index("config_hash")
    assert len(par) == 8 and par.index.is_unique
    metrics = ["final_test_accuracy", "final_test_loss", "final_train_loss", "run_dir"]
    pd.testing.assert_frame_equal(par.loc[seq.index, metrics], seq[metrics])
    # No mixed rows: every curve row belongs to the run whose identity it carries.
    curves = load_curves(tmp_path / "parallel")
    per_run = curves.groupby("run_dir")[["model", "optimizer", "seed"]].nunique()
    assert (per_run == 1).all().all() and len(per_run) == 8


@pytest.mark.slow
def test_submitit_local_launcher(tmp_path):
    result = sweep(
        tmp_path,
        *TINY,
        "model=net1",
        "optimizer=sgd,adam",
        "hydra/launcher=submitit_local",
        "hydra.launcher.timeout_min=5",
    )
    assert result.returncode == 0, result.stderr
    runs = pd.read_parquet(tmp_path / "sweep" / "runs.parquet")
    assert sorted(runs.optimizer) == ["adam", "sgd"]


def test_slurm_launcher_gives_submitit_a_valid_job_script(tmp_path):
    """No cluster here: the launcher Hydra builds from conf/hydra/launcher/slurm.yaml must hand
    submitit only parameters it knows, and submitit's own sbatch writer must turn them into the
    resources we asked for."""
    import submitit
    from hydra.utils import instantiate
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from omegaconf import OmegaConf
    from submitit.slurm.slurm import _make_sbatch_string

    with hydra_context():
        overrides = ["hydra/launcher=slurm", "hydra.launcher.partition=gpu", "experiment=course"]
        cfg = compose_config(overrides, return_hydra_config=True)
    launcher = instantiate(cfg.hydra.launcher)  # the plugin's SlurmLauncher, as -m builds it
    params = dict(launcher.params)
    # As the launcher passes them on: its generic keys as they are, the rest as slurm_<key>.
    generic = set(OmegaConf.structured(BaseQueueConf).keys())
    specific = {k for k in params if k not in generic and k != "max_num_timeout"}
    assert specific <= submitit.SlurmExecutor._valid_parameters(), specific
    jobs = len(sweep_jobs(cfg))
    script = _make_sbatch_string(
        command="python -m harness",
        folder=tmp_path,
        partition=params["partition"],
        time=params["timeout_min"],
        nodes=params["nodes"],
        ntasks_per_node=params["tasks_per_node"],
        cpus_per_task=params["cpus_per_task"],
        gpus_per_node=params["gpus_per_node"] or None,
        mem=f"{params['mem_gb']}GB",
        array_parallelism=params["array_parallelism"],
        map_count=jobs,
    )
    for line in (
        "#SBATCH --partition=gpu",
        "#SBATCH --time=60",
        "#SBATCH --cpus-per-task=2",
        "#SBATCH --mem=8GB",
        f"#SBATCH --array=0-{jobs - 1}%64",
    ):
        assert line in script, line
    # The job logs go under the sweep folder, on the file system the nodes share.
    assert params["submitit_folder"] == f"{cfg.hydra.sweep.dir}/.submitit/%j"


@pytest.mark.slow
def test_default_sweep_stacks_and_gives_the_single_engine_results_and_resumes(tmp_path):
    axes = [*TINY, "model=net1,net2", "optimizer=sgd,adam,rmsprop", "seed=0", "threads=1"]
    assert sweep(tmp_path, *axes, "train.engine=single", name="single").returncode == 0
    result = sweep(tmp_path, *axes, name="stacked")  # the default: stacked where runs group
    assert result.returncode == 0, result.stderr
    assert "training 6 runs as 2 tasks" in result.stdout
    single = pd.read_parquet(tmp_path / "single" / "runs.parquet").set_index("config_hash")
    stack = pd.read_parquet(tmp_path / "stacked" / "runs.parquet").set_index("config_hash")
    assert sorted(stack.index) == sorted(single.index)  # same configs, same run folders
    pd.testing.assert_series_equal(stack.run_dir, single.run_dir.loc[stack.index])
    for metric in ("final_test_loss", "final_train_loss"):
        assert (stack[metric] - single[metric].loc[stack.index]).abs().max() < 1e-4
    folder = tmp_path / "stacked"
    records = [json.loads(p.read_text()) for p in folder.rglob("run.json")]
    assert {r["engine"] for r in records} == {"stacked"}
    fused = {("net2", "sgd"), ("net2", "adam")}  # SGD and Adam on >= 50,000 parameters
    for r in records:
        model, optimizer = r["choices"]["model"], r["choices"]["optimizer"]
        expected = "torch_fused" if (model, optimizer) in fused else "stacked_rule"
        assert r["update_path"] == expected, (model, optimizer)
    records = [json.loads(p.read_text()) for p in (tmp_path / "single").rglob("run.json")]
    assert {(r["engine"], r["update_path"]) for r in records} == {("single", "optimizer_step")}
    hydra_files = {"config.yaml", "hydra.yaml", "overrides.yaml"}
    assert all({p.name for p in d.iterdir()} == hydra_files for d in folder.glob("*/.hydra"))
    again = sweep(tmp_path, *axes, name="stacked")
    assert again.returncode == 0 and again.stdout.count("skipped") == 6


def fake_runs(sweep_dir, digests):
    """Run folders holding a run.json with each config hash."""
    for digest in digests:
        (sweep_dir / digest).mkdir(parents=True)
        (sweep_dir / digest / "run.json").write_text(json.dumps({"config_hash": digest}))


def test_resume_reads_the_index_not_every_run(tmp_path, monkeypatch):
    fake_runs(tmp_path, ["a", "b"])
    assert write_index(tmp_path) == {"a": "a", "b": "b"}
    fake_runs(tmp_path, ["c"])
    reads = []
    monkeypatch.setattr(
        finished_module, "read_run", lambda d: reads.append(d.name) or {"config_hash": d.name}
    )
    # The next invocation's index reads only the run.json it did not know.
    assert write_index(tmp_path) == {"a": "a", "b": "b", "c": "c"} and reads == ["c"]
    # A job's check reads the index, not the run folders.
    monkeypatch.setattr(finished_module, "config_hash", lambda config: config["hash"])
    reads.clear()
    for digest in "abc":
        assert already_finished({"hash": digest}, tmp_path, tmp_path / "new") == digest
    assert already_finished({"hash": "d"}, tmp_path, tmp_path / "d") is None
    assert reads == []


def test_a_run_finished_since_the_index_is_found_in_its_folder(tmp_path, monkeypatch):
    write_index(tmp_path)
    fake_runs(tmp_path, ["x"])  # finished after the sweep started (e.g. by another process)
    monkeypatch.setattr(finished_module, "config_hash", lambda config: config["hash"])
    assert already_finished({"hash": "x"}, tmp_path, tmp_path / "x") == "x"
    with pytest.raises(ConfigError, match="holds a finished run of another config"):
        already_finished({"hash": "y"}, tmp_path, tmp_path / "x")
    # Hydra may name the sweep folder relative to the working directory, the run's absolutely.
    monkeypatch.chdir(tmp_path.parent)
    relative = Path(tmp_path.name)
    assert already_finished({"hash": "x"}, relative, tmp_path / "x") == "x"


def test_progress_extrapolates_from_the_cost_done_where_the_costs_are_known(caplog):
    """A sweep's first task is its costliest (a zoo's net3 stacks): counting runs, one run of
    ten done in 100 s leaves 900 s; weighted by cost (that run is half the work) it leaves 100 s."""
    costs = [9.0] + [1.0] * 9
    with caplog.at_level("INFO", logger="harness.sweeps.progress"):
        Progress(10, started=time.time() - 100).done(1)
        Progress(10, started=time.time() - 100, costs=costs).done(1, 9.0)
    counted, weighted = (re.search(r"~(\S+) left", m).group(1) for m in caplog.messages)
    assert counted.startswith("15m") and weighted.startswith("1m")


def test_progress_takes_the_pace_of_the_tasks_done_not_the_time_elapsed(caplog):
    """Two workers, an hour in: one task of 2 estimated seconds done in 200 s of its own, the
    other worker busy all the while with a long stack that credits nothing yet. The elapsed
    hour would say 4 h left; the pace of the task done, 8 x 100 s over two workers: 400 s."""
    with caplog.at_level("INFO", logger="harness.sweeps.progress"):
        Progress(10, started=time.time() - 3600, costs=[1.0] * 10, workers=2).done(2, 2.0, 200.0)
        Progress(10, started=time.time() - 3600, costs=[1.0] * 10, workers=2).done(2, 2.0)
    paced, elapsed = (re.search(r"~(\S+) left", m).group(1) for m in caplog.messages)
    assert paced == format_seconds(400) and elapsed == format_seconds(4 * 3600)


def test_progress_credits_the_tasks_in_flight_with_the_part_their_time_covers(caplog):
    """Two workers at a pace of 100 s per estimated second: one task of 2 done, the other
    worker's task of 3 begun 200 s ago. Counted as wholly to do, 8 estimated seconds are left
    (400 s over two workers); its 200 s cover 2 of its 3: 6 are left, 300 s. A task in flight
    longer than its estimate covers it whole, never more."""
    with caplog.at_level("INFO", logger="harness.sweeps.progress"):
        for begun in (None, 200.0, 10_000.0):
            progress = Progress(10, started=time.time() - 3600, costs=[1.0] * 10, workers=2)
            if begun is not None:
                # half a second later than said: the clock moves on until `done` reads it
                progress.start("long stack", 3.0, at=time.time() - begun + 0.5)
            progress.start("short stack", 2.0)
            progress.done(2, 2.0, 200.0, "short stack")
    left = [re.search(r"~(\S+) left", m).group(1) for m in caplog.messages]
    assert left == [format_seconds(400), format_seconds(300), format_seconds(250)]


def test_the_time_left_is_at_least_what_is_left_of_the_longest_task_in_flight(caplog):
    """The end of a sweep: its last stack (cost 4, just begun) on one of two workers, nothing
    else to do. Spread over the workers the work says 200 s; that stack alone takes 400 s."""
    with caplog.at_level("INFO", logger="harness.sweeps.progress"):
        progress = Progress(10, started=time.time() - 3600, costs=[2.0, 4.0], workers=2)
        progress.start("last stack", 4.0)
        progress.start("short stack", 2.0)
        progress.done(2, 2.0, 200.0, "short stack")
    [left] = [re.search(r"~(\S+) left", m).group(1) for m in caplog.messages]
    assert left in (format_seconds(400), format_seconds(399))  # the clock moved on a little
