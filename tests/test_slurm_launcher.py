"""hydra/launcher=slurm: one submitit job per stack (submitit's local executor here: no cluster),
the stacked launcher's results, a failed job named in one line, resume; the job array sbatch is
given; bad launcher settings."""

import json
import os
import pickle
import re
from pathlib import Path

import pandas as pd
import pytest
from hydra.utils import instantiate

from conftest import compose_config, hydra_context, max_difference, run_cli
from harness.errors import ConfigError, DataError
from harness.problems.classification.mnist import load_mnist
from harness.results import RUN_FILE

TESTS = Path(__file__).resolve().parent
# 2 batch sizes x 2 optimizers of one net: the runs of a batch size stack, 2 stacks.
SWEEP = [
    "model=net1",
    "optimizer=sgd,adam",
    "train.batch_size=50,100",
    "train.iterations=20",
    "train.eval_every=10",
    "data.train_size=500",
    "data.val_size=200",
    "data.test_size=200",
]
# cpus_per_task=1: one thread per job (the stacked launcher trains a small sweep's stacks with
# one too), and not torch's default on this machine: the records show it reached the jobs.
SLURM = ["hydra/launcher=slurm", "hydra.launcher.cluster=local", "hydra.launcher.cpus_per_task=1"]


def sweep(tmp_path: Path, name: str, *overrides: str):
    return run_cli("-m", *overrides, f"hydra.sweep.dir={tmp_path / name}", cwd=tmp_path)


def submitted_jobs(folder: Path) -> list[list[dict]]:
    """The run.json records each submitit job returned, one list per submitted job (a failed or
    unfinished one: an empty list)."""
    jobs = []
    for pickled in sorted((folder / ".submitit").glob("*/*_submitted.pkl")):
        result = pickled.parent / pickled.name.replace("_submitted.pkl", "_0_result.pkl")
        outcome, records = pickle.loads(result.read_bytes()) if result.exists() else ("", [])
        jobs.append(records if outcome == "success" else [])
    return jobs


def runs_of(folder: Path) -> dict[str, dict]:
    """Each finished run's record, by its folder name."""
    return {p.parent.name: json.loads(p.read_text()) for p in folder.glob(f"*/{RUN_FILE}")}


@pytest.mark.slow
def test_one_job_per_stack_gives_the_stacked_launchers_results(tmp_path):
    result = sweep(tmp_path, "slurm", *SWEEP, *SLURM)
    assert result.returncode == 0, result.stderr
    assert sweep(tmp_path, "stacked", *SWEEP).returncode == 0  # the default launcher

    jobs = submitted_jobs(tmp_path / "slurm")
    assert len(jobs) == 2  # one per stack, not one per run
    for records in jobs:  # each job trained one stack: sgd and adam of one batch size
        assert sorted(r["choices"]["optimizer"] for r in records) == ["adam", "sgd"]
        assert len({r["config"]["train"]["batch_size"] for r in records}) == 1
    slurm, stacked = runs_of(tmp_path / "slurm"), runs_of(tmp_path / "stacked")
    assert len(slurm) == 4 and slurm.keys() == stacked.keys()  # the same run folders
    for name, record in slurm.items():
        assert record["status"] == "completed" and record["engine"] == "stacked"
        assert record["threads"] == stacked[name]["threads"] == 1
        assert record["config_hash"] == stacked[name]["config_hash"]
        assert record["final"] == stacked[name]["final"]
        a, b = (
            pd.read_parquet(tmp_path / s / name / "metrics.parquet") for s in ("slurm", "stacked")
        )
        assert max_difference(a, b) == 0
    runs = pd.read_parquet(tmp_path / "slurm" / "runs.parquet")  # consolidated as any sweep
    assert len(runs) == 4


def mnist_failing_in_jobs(**data):  # noqa: ANN003, ANN201
    """load_mnist, but in a submitit job (not in the launcher, which checks every run) and for
    data.train_size=400 only, a DataError while $FAIL_IN_JOBS is set: data missing on a node."""
    in_job = "SUBMITIT_EXECUTOR" in os.environ
    if in_job and os.environ.get("FAIL_IN_JOBS") and data["train_size"] == 400:
        raise DataError("no MNIST on this node")
    return load_mnist(**data)


@pytest.mark.slow
def test_a_failed_job_is_named_in_one_line_and_the_sweep_resumes(tmp_path, monkeypatch):
    # Two stacks by their data (a net1 sgd + adam each); the job of the 400-image one fails.
    overrides = [
        *(o for o in SWEEP if not o.startswith(("train.batch_size=", "data.train_size="))),
        "data.train_size=500,400",
        "data._target_=test_slurm_launcher.mnist_failing_in_jobs",
        *SLURM,
    ]
    paths = [str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))  # the jobs import this module
    monkeypatch.setenv("FAIL_IN_JOBS", "1")
    folder = tmp_path / "sweep"
    result = sweep(tmp_path, "sweep", *overrides)
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("harness-train:")]
    assert len(errors) == 1, result.stderr
    assert "1 of 2 submitit jobs failed, 2 runs not trained" in errors[0]
    assert "DataError: no MNIST on this node" in errors[0]
    log = Path(re.search(r"its log: (\S+)", errors[0]).group(1))
    assert log.is_file() and log.is_relative_to(folder / ".submitit")
    assert "DataError: no MNIST on this node" in log.read_text()
    # The other job's runs are written.
    finished = runs_of(folder)
    assert len(finished) == 2
    assert {r["config"]["data"]["train_size"] for r in finished.values()} == {500}

    monkeypatch.delenv("FAIL_IN_JOBS")
    result = sweep(tmp_path, "sweep", *overrides)  # the same command: resumes
    assert result.returncode == 0, result.stderr
    jobs = submitted_jobs(folder)
    assert len(jobs) == 3  # one more: the failed stack's, its runs only
    assert sorted(len(records) for records in jobs) == [0, 2, 2]
    assert len(runs_of(folder)) == 4
    assert all(r["status"] == "completed" for r in runs_of(folder).values())


@pytest.mark.slow
def test_sbatch_gets_one_job_array_with_the_configs_resources(tmp_path, monkeypatch):
    """No cluster here: a fake srun makes submitit's SLURM executor available, and a fake
    sbatch keeps the script the launcher submits and refuses it, as sbatch refuses a job for a
    partition that does not exist."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fakes = {
        "srun": "#!/bin/sh\n",
        "sbatch": '#!/bin/sh\ncp "$1" "$SBATCH_COPY"\n'
        'echo "sbatch: error: invalid partition specified: gpu" >&2\nexit 1\n',
    }
    for name, text in fakes.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SBATCH_COPY", str(tmp_path / "script.sh"))
    result = sweep(
        tmp_path,
        "sweep",
        *SWEEP,
        "hydra/launcher=slurm",
        "hydra.launcher.partition=gpu",
        "hydra.launcher.account=lab",
        "hydra.launcher.gpus_per_node=1",
        "+hydra.launcher.additional_parameters.qos=high",
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "harness-train: error: hydra/launcher=slurm: the jobs were not submitted: "
        "sbatch: error: invalid partition specified: gpu"
    )
    assert not (tmp_path / "sweep").exists()  # nothing trained: the new folder is removed
    script = (tmp_path / "script.sh").read_text()
    for line in (
        "#SBATCH --array=0-1%2",  # one job array, a job per stack
        "#SBATCH --partition=gpu",
        "#SBATCH --account=lab",
        "#SBATCH --qos=high",
        "#SBATCH --time=60",
        "#SBATCH --cpus-per-task=2",
        "#SBATCH --gpus-per-node=1",
        "#SBATCH --mem=8GB",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --job-name=harness-sweep",
        f"#SBATCH --output={tmp_path}/sweep/.submitit/%A_%a/%A_%a_0_log.out",
    ):
        assert line in script, line


def test_an_unknown_launcher_setting_is_named_in_one_line(tmp_path):
    with hydra_context():
        overrides = [*SLURM, "+hydra.launcher.no_such_option=1"]
        cfg = compose_config([*overrides, f"hydra.sweep.dir={tmp_path}"], return_hydra_config=True)
    launcher = instantiate(cfg.hydra.launcher)
    with pytest.raises(
        ConfigError, match="^hydra/launcher=slurm: Unknown argument 'no_such_option'"
    ):
        launcher.executor("harness-sweep")


@pytest.mark.parametrize(
    ("override", "error"),
    [
        (
            "hydra.launcher.max_num_timeout=-1",
            "hydra.launcher.max_num_timeout must be a whole number of requeues >= 0, not -1",
        ),
        (
            "hydra.launcher.tasks_per_node=2",
            "hydra.launcher.tasks_per_node must be 1 (a job trains its stack in one process), "
            "not 2",
        ),
    ],
)
def test_a_bad_job_setting_is_refused_before_anything_is_written(tmp_path, override, error):
    result = sweep(tmp_path, "sweep", *SWEEP, *SLURM, override)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == f"harness-train: error: {error}"
    assert not (tmp_path / "sweep").exists()
