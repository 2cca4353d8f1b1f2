"""Tracking tools (harness.loggers, `logger=` config group): runs stream their metrics to a real
MLflow store and to TensorBoard event files while they train, read back here through MLflow's
own client and TensorBoard's own reader; a stopped sweep resumes each record without a step
twice and without a run left running; `logger` is not part of a run's identity."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from omegaconf import OmegaConf

from conftest import MNIST_DIR, compose_config, hydra_context, run_cli, small
from harness.config.identity import config_hash
from harness.loggers.export import export
from harness.loggers.mlflow import store_lock
from harness.results import CHECKPOINTS_FOLDER
from harness.stacking.stack import execute_group
from harness.training.checkpoint import Checkpoint
from harness.training.job import Job

mlflow = pytest.importorskip("mlflow", reason="the tracking extra: pip install -e '.[tracking]'")
pytest.importorskip("tensorboard", reason="the tracking extra: pip install -e '.[tracking]'")

from mlflow.tracking import MlflowClient  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import (  # noqa: E402
    EventAccumulator,
)

TINY = [
    "data.train_size=1000",
    "data.val_size=200",
    "data.test_size=200",
    "train.iterations=60",
    "train.eval_every=20",
    "train.log_every=5",
    "train.eval_train_size=200",
]


def histories(metrics: pd.DataFrame) -> dict[str, list[tuple[int, float]]]:
    """metrics.parquet as {metric: [(iteration, value), ...]} in step order."""
    return {
        metric: list(zip(rows["iteration"].astype(int), rows["value"], strict=True))
        for metric, rows in metrics.sort_values("iteration").groupby("metric")
    }


def mlflow_histories(client: MlflowClient, run) -> dict[str, list[tuple[int, float]]]:
    return {
        key: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
        for key in run.data.metrics
    }


def tensorboard_histories(folder) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    events.Reload()
    return {
        tag: sorted((e.step, e.value) for e in events.Scalars(tag))
        for tag in events.Tags()["scalars"]
    }


def as_float32(found: dict[str, list[tuple[int, float]]]) -> dict[str, list[tuple[int, float]]]:
    """TensorBoard's scalars are float32."""
    return {k: [(s, float(np.float32(v))) for s, v in rows] for k, rows in found.items()}


@pytest.mark.slow
def test_a_stacked_sweep_in_workers_streams_every_run_to_mlflow_and_tensorboard(
    tmp_path, monkeypatch
):
    """`harness-train -m logger=[tensorboard,mlflow]`, its two stacks trained in worker processes,
    to the store $MLFLOW_TRACKING_URI names: one experiment for the study, one finished MLflow
    run per run with its metric histories equal to metrics.parquet, the study's varied keys
    as params, its tags, its config and run.json as artifacts; one event folder per run that
    TensorBoard's reader reads as metrics.parquet."""
    store = f"sqlite:///{tmp_path / 'store.db'}"
    folder = tmp_path / "study"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    result = run_cli(
        "-m",
        *TINY,
        "model=net1,net2",
        "optimizer=sgd,adam",
        "logger=[tensorboard,mlflow]",
        "hydra.launcher.use_workers=true",
        "hydra.launcher.n_jobs=2",
        f"hydra.sweep.dir={folder}",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "SpawnProcess" in result.stdout + result.stderr  # trained in a worker
    assert not (tmp_path / "mlflow.db").exists()  # the environment's store, not the default

    client = MlflowClient(tracking_uri=store)
    experiment = client.get_experiment_by_name("study")
    runs = client.search_runs([experiment.experiment_id])
    run_dirs = sorted(p.parent for p in folder.glob("*/run.json"))
    assert len(runs) == len(run_dirs) == 4
    by_dir = {run.data.tags["run_dir"]: run for run in runs}
    for run_dir in run_dirs:
        record = json.loads((run_dir / "run.json").read_text())
        metrics = pd.read_parquet(run_dir / "metrics.parquet")
        run = by_dir[str(run_dir)]
        assert run.info.status == "FINISHED"
        assert mlflow_histories(client, run) == histories(metrics)
        assert run.data.params == dict(part.split("=") for part in run_dir.name.split(","))
        tags = run.data.tags
        assert tags["study"] == "study" and tags["config_hash"] == record["config_hash"]
        assert tags["engine"] == "stacked" and tags["update_path"] == record["update_path"]
        assert tags["seed"] == str(record["seed"]) and tags["diverged"] == "false"
        assert tags["device"] == "cpu" and tags["version.torch"] == record["versions"]["torch"]
        stored = client.download_artifacts(run.info.run_id, "run.json", str(tmp_path))
        assert json.loads(Path(stored).read_text()) == record
        config = client.download_artifacts(run.info.run_id, "config.yaml", str(tmp_path))
        assert yaml.safe_load(Path(config).read_text()) == record["config"]
        assert tensorboard_histories(run_dir / "tensorboard") == as_float32(histories(metrics))

    # the same study exported after the fact, from its consolidated tables, twice: the same
    # MLflow runs, once
    exported = f"sqlite:///{tmp_path / 'exported.db'}"
    assert export(folder, "mlflow", uri=exported) == export(folder, "mlflow", uri=exported) == 4
    client = MlflowClient(tracking_uri=exported)
    runs = client.search_runs([client.get_experiment_by_name("study").experiment_id])
    assert len(runs) == 4
    for run in runs:
        run_dir = Path(run.data.tags["run_dir"])
        assert run.info.status == "FINISHED"
        assert run.data.params == dict(part.split("=") for part in run_dir.name.split(","))
        metrics = pd.read_parquet(run_dir / "metrics.parquet")
        assert mlflow_histories(client, run) == histories(metrics)


def stop_at(monkeypatch, saved_until: int, stop: int) -> None:
    """Checkpoints are saved up to step `saved_until`; training stops at step `stop`, as a
    killed process stops: the steps in between were recorded (and streamed) but not saved."""
    save = Checkpoint.save

    def save_then_stop(self, state):
        if state["iteration"] <= saved_until:
            save(self, state)
        if state["iteration"] >= stop:
            raise KeyboardInterrupt

    monkeypatch.setattr(Checkpoint, "save", save_then_stop)


@pytest.mark.slow
def test_a_stopped_stack_resumes_its_records_without_a_step_twice(tmp_path, mnist_dir, monkeypatch):
    """A stack stopped at step 40, its last checkpoint at step 20, with every row streamed as
    recorded (flush_s=0): the records show it killed with steps up to 40; the same stack goes
    on from step 20 and continues the same MLflow runs and event folders, and they end with
    exactly metrics.parquet's steps (none twice), FINISHED, a diverged member tagged so."""
    store = f"sqlite:///{tmp_path / 'store.db'}"
    loggers = [
        "logger=[tensorboard,mlflow]",
        f"logger.mlflow.tracking_uri={store}",
        "logger.mlflow.experiment=resumed",
        "logger.mlflow.flush_s=0",
        "logger.tensorboard.flush_s=0",
    ]
    members = [["optimizer=sgd"], ["optimizer=adam"], ["optimizer=adam", "optimizer.lr=50"]]
    with hydra_context():
        base = [f"data.root={mnist_dir}", *small("float32", 60, 10, 5), "model=net1", *loggers]
        cfgs = [compose_config([*base, *m]) for m in members]
    jobs = [Job.of(cfg, tmp_path / "study" / f"run{i}") for i, cfg in enumerate(cfgs)]
    with monkeypatch.context() as patched:
        stop_at(patched, 20, 40)
        with pytest.raises(KeyboardInterrupt):
            execute_group(jobs, checkpoint_every_s=0)

    client = MlflowClient(tracking_uri=store)
    experiment = client.get_experiment_by_name("resumed").experiment_id
    stopped = client.search_runs([experiment])
    assert len(stopped) == 3 and {r.info.status for r in stopped} == {"KILLED"}
    reached = max(m.step for r in stopped for m in client.get_metric_history(r.info.run_id, "lr"))
    assert reached == 40  # streamed past the checkpoint before the stop

    records = execute_group(jobs, checkpoint_every_s=0)
    assert [r["resumed_at"] for r in records] == [[20]] * 3
    assert records[2]["status"] == "diverged"
    runs = {r.data.tags["run_dir"]: r for r in client.search_runs([experiment])}
    assert len(runs) == 3
    for job, record in zip(jobs, records, strict=True):
        metrics = histories(pd.read_parquet(job.out_dir / "metrics.parquet"))
        run = runs[str(job.out_dir.resolve())]
        assert run.info.status == "FINISHED"
        assert run.data.tags["diverged"] == str(record["status"] == "diverged").lower()
        assert mlflow_histories(client, run) == metrics
        assert tensorboard_histories(job.out_dir / "tensorboard") == as_float32(metrics)


@pytest.mark.slow
def test_a_sweep_killed_by_sigkill_resumes_its_records_without_a_step_twice(tmp_path):
    """SIGKILL to a sweep's process group once a stack has saved a checkpoint and streamed
    steps past it (flush_s=0): its MLflow runs are left RUNNING, as a killed process leaves
    them. The same command goes on from the checkpoint and continues the same MLflow runs and
    event folders: each ends with exactly metrics.parquet's steps (none twice), FINISHED."""
    store = f"sqlite:///{tmp_path / 'store.db'}"
    folder = tmp_path / "study"
    overrides = [
        "-m",
        *TINY,
        # long enough for the logging process (MLflow's import and a new store: seconds) to
        # stream steps past a checkpoint before the training ends
        "train.iterations=12000",
        "train.eval_every=500",
        "train.log_every=50",
        "model=net1",
        "optimizer=sgd,adam",
        "hydra.launcher.checkpoint_every_s=0",
        "hydra.launcher.use_workers=false",
        "logger=[tensorboard,mlflow]",
        f"logger.mlflow.tracking_uri={store}",
        "logger.mlflow.flush_s=0",
        "logger.tensorboard.flush_s=0",
        f"hydra.sweep.dir={folder}",
    ]
    command = [sys.executable, "-c", "from harness.cli import train; train()", *overrides]
    proc = subprocess.Popen(
        command,
        cwd=tmp_path,
        env={**os.environ, "HARNESS_DATA_ROOT": str(MNIST_DIR)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )

    def saved_step() -> int:
        steps = [0]
        for path in (folder / CHECKPOINTS_FOLDER).glob("*.json"):
            with contextlib.suppress(OSError, ValueError):  # replaced while read
                steps.append(json.loads(path.read_text())["iteration"])
        return max(steps)

    def streamed_step() -> int:
        # under the store's lock, as the loggers open it: a client opening a new store makes
        # its tables, and two processes making them at once collide
        with contextlib.suppress(Exception), store_lock(store):
            client = MlflowClient(tracking_uri=store)
            experiment = client.get_experiment_by_name("study")
            runs = client.search_runs([experiment.experiment_id]) if experiment else []
            histories = [client.get_metric_history(r.info.run_id, "lr") for r in runs]
            return max((m.step for h in histories for m in h), default=0)
        return 0

    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        saved = saved_step()
        if saved >= 500 and streamed_step() > saved and saved_step() < 12000:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert saved_step() >= 500
    client = MlflowClient(tracking_uri=store)
    experiment = client.get_experiment_by_name("study").experiment_id
    assert "RUNNING" in {r.info.status for r in client.search_runs([experiment])}

    resumed = run_cli(*overrides, cwd=tmp_path, timeout=900)
    assert resumed.returncode == 0, resumed.stderr
    assert "go on from their checkpoints" in resumed.stdout + resumed.stderr, resumed.stdout
    runs = {r.data.tags["run_dir"]: r for r in client.search_runs([experiment])}
    run_dirs = sorted(p.parent for p in folder.glob("*/run.json"))
    assert len(runs) == len(run_dirs) == 2
    for run_dir in run_dirs:
        metrics = histories(pd.read_parquet(run_dir / "metrics.parquet"))
        run = runs[str(run_dir.resolve())]
        assert run.info.status == "FINISHED"
        assert mlflow_histories(client, run) == metrics
        assert tensorboard_histories(run_dir / "tensorboard") == as_float32(metrics)


def test_the_logger_is_not_part_of_a_run_s_identity(mnist_dir):
    """Logging does not change what a run computes: its config hash is the same with or
    without loggers."""
    with hydra_context():
        plain = compose_config([f"data.root={mnist_dir}"])
        logged = compose_config([f"data.root={mnist_dir}", "logger=[tensorboard,mlflow]"])
    assert set(logged.logger) == {"tensorboard", "mlflow"} and not plain.logger
    resolved = [OmegaConf.to_container(c, resolve=True) for c in (plain, logged)]
    assert config_hash(resolved[0]) == config_hash(resolved[1])
