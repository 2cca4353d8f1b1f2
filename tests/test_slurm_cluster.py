"""hydra/launcher=slurm on a real single-node SLURM cluster (tests/slurm_cluster.py; marker
`slurm`): a sweep's stacks run as SLURM jobs and consolidate as under the default launcher; a
job cancelled in the middle of its stack, and one warned of its time limit, go on from the
stack's checkpoint (the sweep run again; the job requeued) and end with the results of a sweep
never stopped."""

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest
from test_slurm_launcher import SWEEP  # 2 stacks of one net: 2 jobs

from conftest import HARNESS_TRAIN, MNIST_DIR, run_cli
from harness.results import CHECKPOINTS_FOLDER, METRICS_FILE, RUN_FILE
from slurm_cluster import PARTITION, Cluster

pytestmark = pytest.mark.slurm

TESTS = Path(__file__).resolve().parent
TINY_DATA = ["data.train_size=500", "data.val_size=200", "data.test_size=200"]
# One stack of 2 runs whose every step sleeps 0.1 s in a SLURM job while the test's nap file
# exists (conftest.NappingSGD): 60 s for the stack's 300 steps, a second once the file is gone.
SLOW = [
    "model=net1",
    "optimizer=sgd",
    "optimizer._target_=conftest.NappingSGD",
    "optimizer.lr=0.05,0.1",
    "train.batch_size=50",
    "train.iterations=300",
    "train.eval_every=100",
    "train.log_every=10",
    *TINY_DATA,
]


def on_cluster(*settings: str) -> list[str]:
    """The launcher on the test cluster: a core and 1 GB per job (2 jobs at once), a
    checkpoint at every log point, and `settings`."""
    return [
        "hydra/launcher=slurm",
        "hydra.launcher.cluster=slurm",
        f"hydra.launcher.partition={PARTITION}",
        "hydra.launcher.cpus_per_task=1",
        "hydra.launcher.mem_gb=1",
        "hydra.launcher.checkpoint_every_s=0",
        *settings,
    ]


def python_path() -> str:
    """PYTHONPATH with this folder on it: the sweeps' processes import conftest."""
    return os.pathsep.join([str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])])


class Background:
    """`harness-train -m ...` started and left waiting for its jobs, as a user leaves it."""

    def __init__(self, folder: Path, name: str, overrides: list[str]) -> None:
        self.out, self.err = folder / f"{name}.out", folder / f"{name}.err"
        with self.out.open("w") as out, self.err.open("w") as err:
            self.process = subprocess.Popen(
                [*HARNESS_TRAIN, "-m", *overrides, f"hydra.sweep.dir={folder / name}"],
                cwd=folder,
                stdout=out,
                stderr=err,
                env={**os.environ, "HARNESS_DATA_ROOT": str(MNIST_DIR)},
            )

    def running(self) -> bool:
        return self.process.poll() is None

    def result(self, timeout: float = 240) -> subprocess.CompletedProcess:
        self.process.wait(timeout)
        return subprocess.CompletedProcess(
            self.process.args, self.process.returncode, self.out.read_text(), self.err.read_text()
        )


@pytest.fixture(autouse=True)
def cluster(slurm_cluster: Cluster, monkeypatch) -> Cluster:
    """The cluster, for the SLURM commands of this test and of the sweeps it starts (whose jobs
    import conftest, for NappingSGD)."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    monkeypatch.setenv("PYTHONPATH", python_path())
    return slurm_cluster


@pytest.fixture
def submit(tmp_path, cluster) -> Iterator[Callable[..., Background]]:
    """Start a sweep in tmp_path/<name> in the background; what a failed test left (the
    command, its jobs) is stopped after it."""
    started: list[Background] = []

    def start(name: str, *overrides: str) -> Background:
        started.append(Background(tmp_path, name, list(overrides)))
        return started[-1]

    yield start
    for sweep in started:
        if sweep.running():
            sweep.process.kill()
            sweep.process.wait()
    cluster.run("scancel", f"--user={cluster.user}", check=False)


@pytest.fixture
def nap(tmp_path, monkeypatch) -> Path:
    """The file while which NappingSGD's steps sleep, in this test's jobs."""
    flag = tmp_path / "nap"
    flag.touch()
    monkeypatch.setenv("NAP_WHILE", str(flag))
    return flag


@pytest.fixture(scope="module")
def slow_reference(tmp_path_factory) -> Path:
    """The SLOW sweep under the default launcher, never stopped (no nap: seconds)."""
    folder = tmp_path_factory.mktemp("reference")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", python_path())
        result = run_cli("-m", *SLOW, f"hydra.sweep.dir={folder / 'sweep'}", cwd=folder)
    assert result.returncode == 0, result.stderr
    return folder / "sweep"


def wait_for(condition: Callable, what: str, timeout: float = 180):  # noqa: ANN201
    """condition()'s first true value, polled every 0.2 s for at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < deadline, f"{what}: not seen in {timeout} s"
        time.sleep(0.2)
    return found


def running_job(cluster: Cluster, name: str) -> str | None:
    """The id of the one job named `name` that runs (an array task: <array>_<index>)."""
    running = [job for job, state in cluster.queue(name).items() if state == "RUNNING"]
    return running[0] if len(running) == 1 else None


def saved_step(sweep: Path) -> int:
    """The step of the latest checkpoint saved in the sweep folder (0: none)."""
    steps = [0]
    for index in (sweep / CHECKPOINTS_FOLDER).glob("*.json"):
        with contextlib.suppress(OSError, ValueError):  # replaced while read
            steps.append(json.loads(index.read_text())["iteration"])
    return max(steps)


def submitted(sweep: Path) -> set[str]:
    """The ids of the jobs the sweep's commands submitted, by their submitit folders."""
    return {p.parent.name for p in (sweep / ".submitit").glob("*/*_submitted.pkl")}


def runs_of(sweep: Path) -> dict[str, dict]:
    """Each finished run's record, by its folder name."""
    return {p.parent.name: json.loads(p.read_text()) for p in sweep.glob(f"*/{RUN_FILE}")}


def assert_same_results(sweep: Path, reference: Path) -> None:
    """The same runs, with the same consolidated results (runs.parquet) and curves, to the last
    bit: only measured times differ."""

    def runs(folder: Path) -> pd.DataFrame:
        table = pd.read_parquet(folder / "runs.parquet")
        times = [c for c in table.columns if "time" in c and c.endswith("_s")]  # measured
        return table.drop(columns=times).sort_values("run_dir").reset_index(drop=True)

    pd.testing.assert_frame_equal(runs(sweep), runs(reference), check_exact=True)
    assert runs_of(sweep).keys() == runs_of(reference).keys()
    for name in runs_of(sweep):
        a, b = (pd.read_parquet(f / name / METRICS_FILE) for f in (sweep, reference))
        pd.testing.assert_frame_equal(
            a.drop(columns="time_s"), b.drop(columns="time_s"), check_exact=True
        )


def test_a_sweeps_stacks_run_as_slurm_jobs_and_consolidate_as_under_the_default_launcher(
    tmp_path, cluster, submit
):
    sweep = submit("slurm", *SWEEP, *on_cluster())
    seen: dict[str, set[str]] = {}  # each job's states, as squeue showed them
    while sweep.running():
        for job, state in cluster.queue("harness-slurm").items():
            seen.setdefault(job, set()).add(state)
        time.sleep(0.2)
    result = sweep.result()
    assert result.returncode == 0, result.stderr

    jobs = sorted(submitted(tmp_path / "slurm"))
    assert len(jobs) == 2 and sorted(seen) == jobs  # one job per stack, of one job array
    assert all("RUNNING" in states for states in seen.values()), seen
    for job in jobs:
        found = cluster.job(job)  # the finished jobs, as SLURM keeps them
        assert (found["JobState"], found["ExitCode"]) == ("COMPLETED", "0:0"), found
        assert (found["Partition"], found["NumCPUs"]) == (PARTITION, "1")
    accounted = cluster.run("sacct", "--noheader", "--parsable2", "--format=JobID,State", "-X")
    states = dict(line.split("|") for line in accounted.split())  # what submitit reads
    assert [states[job] for job in jobs] == ["COMPLETED", "COMPLETED"]
    records = runs_of(tmp_path / "slurm")
    assert len(records) == 4 and all(r["threads"] == 1 for r in records.values())

    reference = run_cli("-m", *SWEEP, f"hydra.sweep.dir={tmp_path / 'stacked'}", cwd=tmp_path)
    assert reference.returncode == 0, reference.stderr
    assert_same_results(tmp_path / "slurm", tmp_path / "stacked")


def test_a_job_cancelled_mid_stack_goes_on_from_its_checkpoint_when_the_sweep_runs_again(
    tmp_path, cluster, submit, nap, slow_reference
):
    folder, overrides = tmp_path / "sweep", [*SLOW, *on_cluster()]
    sweep = submit("sweep", *overrides)
    wait_for(lambda: saved_step(folder) >= 50, "a checkpoint past step 50 of 300")
    job = wait_for(lambda: running_job(cluster, "harness-sweep"), "the job running")
    cluster.run("scancel", job)
    wait_for(lambda: job not in cluster.queue("harness-sweep"), "the job's end")
    nap.unlink()  # from here on the stack trains at full speed
    result = sweep.result()
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("harness-train:")]
    assert len(errors) == 1, result.stderr
    assert "1 of 1 submitit jobs failed, 2 runs not trained" in errors[0]
    assert f"job {job}: it ended without a result (state CANCELLED" in errors[0]
    assert cluster.job(job)["JobState"] == "CANCELLED"
    assert not runs_of(folder)
    saved = saved_step(folder)  # the last checkpoint: lost, only the steps after it

    again = submit("sweep", *overrides).result()  # the same command
    assert again.returncode == 0, again.stderr
    assert "2 runs of 1 tasks go on from their checkpoints" in again.stdout + again.stderr
    records = runs_of(folder)
    assert len(records) == 2
    assert all(r["resumed_at"] == [saved] for r in records.values()), records
    (resumed_job,) = submitted(folder) - {job}
    assert cluster.job(resumed_job)["JobState"] == "COMPLETED"
    assert_same_results(folder, slow_reference)


def test_a_job_warned_of_its_time_limit_is_requeued_and_goes_on_from_its_checkpoint(
    tmp_path, cluster, submit, nap, slow_reference
):
    """A 1-minute limit, and its warning asked 10 s before it: SLURM sends it 20 to 50 s into
    the job (its checks are 30 s apart, and it warns up to one check early), while the stack
    still naps (60 s). submitit requeues the job, which goes on from the stack's checkpoint;
    the nap ends once the job is requeued with one saved (on a slow machine the first warning
    may come before it: that sitting is trained again, and warned again)."""
    folder = tmp_path / "sweep"
    limit = ["hydra.launcher.timeout_min=1", "hydra.launcher.signal_delay_s=10"]
    sweep = submit("sweep", *SLOW, *on_cluster(*limit))
    job = wait_for(lambda: running_job(cluster, "harness-sweep"), "the job running")
    wait_for(lambda: saved_step(folder) > 0, "a checkpoint")
    restarts = cluster.job(job)["Restarts"]
    wait_for(lambda: cluster.job(job)["Restarts"] != restarts, "the job requeued", timeout=120)
    nap.unlink()  # the requeued job trains at full speed
    result = sweep.result()
    assert result.returncode == 0, result.stderr

    found = cluster.job(job)
    assert (found["JobState"], found["TimeLimit"]) == ("COMPLETED", "00:01:00"), found
    assert int(found["Restarts"]) >= 1
    log = next((folder / ".submitit" / job).glob("*_log.err")).read_text()
    assert "Caught signal SIGUSR2" in log and "this job is timed-out" in log
    assert f"Requeued job {job}" in log
    resumed_at = [r["resumed_at"] for r in runs_of(folder).values()]  # the stack's, each
    assert len(resumed_at) == 2 and resumed_at[0] and resumed_at[0] == resumed_at[1], resumed_at
    assert_same_results(folder, slow_reference)


def test_a_job_warned_but_not_requeued_trains_on_and_fails_no_run(
    tmp_path, cluster, submit, nap, slow_reference
):
    """No requeue allowed (max_num_timeout=0), and a limit under 10 minutes: submitit takes the
    warning (sent by hand, as SLURM sends it: scancel --signal) for the time limit and refuses
    to requeue. Raised where the signal lands, its refusal would be taken for the optimizer's
    failure in that step; the job logs it and trains on, its runs as if never warned."""
    folder = tmp_path / "sweep"
    limit = ["hydra.launcher.timeout_min=5", "hydra.launcher.max_num_timeout=0"]
    sweep = submit("sweep", *SLOW, *on_cluster(*limit))
    wait_for(lambda: saved_step(folder) >= 20, "a checkpoint past step 20 of 300")
    job = wait_for(lambda: running_job(cluster, "harness-sweep"), "the job running")
    cluster.run("scancel", "--signal=USR2", job)
    log = folder / ".submitit" / job / f"{job}_0_log.err"
    refusal = "Job not requeued because: timed-out too many times"
    wait_for(lambda: refusal in log.read_text(), "submitit's refusal")
    nap.unlink()
    result = sweep.result()
    assert result.returncode == 0, result.stderr

    records = runs_of(folder)
    assert [r["status"] for r in records.values()] == ["completed", "completed"], records
    assert "not requeued (" in log.read_text()  # told, and trained on
    found = cluster.job(job)
    assert (found["JobState"], found["Restarts"]) == ("COMPLETED", "0"), found
    assert all(r["resumed_at"] == [] for r in records.values())
    assert_same_results(folder, slow_reference)
