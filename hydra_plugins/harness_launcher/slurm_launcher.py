"""Hydra launcher `hydra/launcher=slurm`: a sweep on a SLURM cluster, one job per stack.

The sweep's jobs are composed, resumed, checked and their run folders created here, exactly as
`hydra/launcher=stacked` does (`StackedLauncher`, which this class extends: only the training
step differs). The runs left to train are then planned into tasks as the stacked launcher plans
them (`harness.sweeps.plan.plan`: the runs that train together as one stacked model, at most
`max_stack` of them; a run that cannot stack alone) and each task is submitted through submitit
as one job, the tasks of a sweep as one job array. A job loads the data, trains its task with
`cpus_per_task` threads and each of its runs writes its results into its own folder, as on one
machine (`train_task`). This process waits for every job and returns their runs' records.

A job that fails ends the sweep with one line naming its submitit log, once the other jobs have
ended: their runs are written, and running the same command again trains only what is missing.
A job warned of its time limit (or preempted) is requeued, and goes on from its stack's last
checkpoint (`TrainTask`). `cluster=local` runs the same path with submitit's local executor (one
process per job on this machine); tests/test_slurm_cluster.py runs it on a real SLURM cluster.
"""

# No `from __future__ import annotations`: Hydra's plugin scan loads this module outside
# sys.modules, where dataclasses cannot resolve string annotations.

import logging
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, env_override
from omegaconf import OmegaConf

from hydra_plugins.harness_launcher.stacked_launcher import StackedLauncher

log = logging.getLogger(__name__)

# The keys submitit's AutoExecutor takes as they are (it translates them for each cluster); the
# other keys of conf/hydra/launcher/slurm.yaml (but cluster, max_stack(_s), submitit_folder) go to
# it as slurm_<key>.
GENERIC_KEYS = (
    "timeout_min",
    "nodes",
    "tasks_per_node",
    "cpus_per_task",
    "gpus_per_node",
    "mem_gb",
)
LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"
POLL_S = 1.0  # how often the jobs' result files are looked for (SLURM is asked less often)


def train_task(
    jobs: Sequence[Any],  # harness.training.job.Job
    stacked: bool,
    threads: int | None,
    env: Mapping[str, str],
    log_level: int,
    checkpoint_every_s: float | None = None,
) -> list[dict[str, Any]]:
    """What one submitted job runs: train one task of a sweep (a stack, or one run with the
    single-run engine) in the job's process, the data loaded here; each run writes its results
    into its own folder, and checkpoints its training every `checkpoint_every_s` seconds (a
    job requeued at its time limit, or a sweep run again, goes on from there). Returns the
    runs' run.json records, in order."""
    from harness.sweeps.execute import _run_task

    logging.basicConfig(level=log_level, format=LOG_FORMAT)
    with env_override(dict(env)):
        return _run_task(jobs, stacked, threads, checkpoint_every_s)


class TrainTask:
    """`train_task` as the callable each job runs, one submitit can checkpoint. SLURM warns a
    job `signal_delay_s` seconds before its time limit (USR2; up to a minute earlier: it checks
    limits every 30 s), and submitit then requeues a job whose callable has a `checkpoint`
    method, with what it returns (a plain function's job it does not requeue). The requeued
    job trains the same task again, which goes on from the stack's own checkpoint
    (harness.training.checkpoint): it loses at most the `checkpoint_every_s` seconds since the last
    one, or the whole sitting where the task saves none. After `max_num_timeout` requeues at
    its time limit the job is not requeued again: it trains on until it is killed, and the
    same command goes on from the checkpoint."""

    def __call__(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        _train_on_where_not_requeued()
        return train_task(*args, **kwargs)

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """What the requeued job runs: this task again, with the same arguments (the stack's
        checkpoint holds its progress, not this object)."""
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(self, *args, **kwargs)


def _train_on_where_not_requeued() -> None:
    """Wrap submitit's handler of its warning signal so that when it does not requeue the job
    (requeued too often, `scontrol requeue` refused) its error is logged, not raised where the
    signal lands: in an optimizer's step it would be taken for that optimizer's failure, and
    its run written as failed. The job then trains on until its time limit. Requeued, the
    handler ends the process (SystemExit), which goes through."""
    import submitit

    signum = submitit.JobEnvironment()._usr_sig()
    handler = signal.getsignal(signum)
    if not callable(handler):  # none of submitit's to wrap
        return

    def handle(number: int, frame: Any) -> None:
        try:
            handler(number, frame)
        except Exception as error:  # noqa: BLE001 - told here; the job trains on
            log.warning(
                "not requeued (%s): training on until the time limit; the same command goes "
                "on from the checkpoint",
                _first_line(error),
            )

    signal.signal(signum, handle)


def _first_line(error: Exception) -> str:
    return next((line.strip() for line in str(error).splitlines() if line.strip()), repr(error))


def _reason(error: Exception, state: str) -> str:
    """One line of why a job failed: the last line of its traceback (the exception), or its
    state when it left no result (killed, timed out, cancelled)."""
    from submitit.core.utils import FailedJobError

    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    dashes = [i for i, line in enumerate(lines) if set(line) == {"-"}]
    if isinstance(error, FailedJobError) and len(dashes) >= 2 and dashes[1] > dashes[0] + 1:
        return lines[dashes[1] - 1][:300]  # the trace sits between two lines of dashes
    return f"it ended without a result (state {state})"


class StackedSlurmLauncher(StackedLauncher):
    """`cluster`: submitit's executor (slurm; local: a process per job on this machine);
    `max_stack`, `max_stack_s`: models per job and its estimated seconds at most (None: no
    bound; `harness.sweeps.plan.plan`); `checkpoint_every_s`: seconds between a job's
    checkpoints (None: none; harness.training.checkpoint); `max_num_timeout`: a job's requeues at
    its time limit, at most (`TrainTask`); every other key is a submitit / SLURM parameter
    (conf/hydra/launcher/slurm.yaml), kept in `params`."""

    def __init__(
        self,
        cluster: str = "slurm",
        max_stack: int | None = None,
        max_stack_s: float | None = None,
        checkpoint_every_s: float | None = None,
        max_num_timeout: int = 3,
        **params: Any,
    ) -> None:
        super().__init__(
            max_stack=max_stack, max_stack_s=max_stack_s, checkpoint_every_s=checkpoint_every_s
        )
        self.cluster = cluster
        self.max_num_timeout = max_num_timeout
        self.params = {
            k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v
            for k, v in params.items()
        }

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        from harness.errors import ConfigError

        for key in ("nodes", "tasks_per_node"):
            if self.params.get(key, 1) != 1:
                # submitit would run the job's function once per task: every run twice
                raise ConfigError(
                    f"hydra.launcher.{key} must be 1 (a job trains its stack in one process), "
                    f"not {self.params[key]}"
                )
        requeues = self.max_num_timeout
        if isinstance(requeues, bool) or not isinstance(requeues, int) or requeues < 0:
            raise ConfigError(
                "hydra.launcher.max_num_timeout must be a whole number of requeues >= 0, "
                f"not {requeues!r}"
            )
        return super().launch(job_overrides, initial_job_idx)

    def executor(self, name: str) -> Any:
        """The submitit executor of this config (AutoExecutor), its parameters set."""
        import submitit

        from harness.errors import ConfigError

        params = dict(self.params)
        folder = params.pop("submitit_folder")
        generic = {k: params.pop(k) for k in GENERIC_KEYS if k in params}
        generic["gpus_per_node"] = generic.get("gpus_per_node") or None  # 0: no --gpus line
        try:
            executor = submitit.AutoExecutor(
                folder=folder, cluster=self.cluster, slurm_max_num_timeout=self.max_num_timeout
            )
            executor.update_parameters(
                name=name, **generic, **{f"slurm_{k}": v for k, v in params.items()}
            )
        except (AssertionError, NameError, ValueError, RuntimeError) as exc:
            raise ConfigError(f"hydra/launcher=slurm: {_first_line(exc)}") from exc
        return executor

    def _train(self, jobs: list, sweep_dir: Path) -> list[dict]:
        from submitit.core.utils import FailedJobError, FailedSubmissionError
        from submitit.helpers import as_completed

        from harness.errors import ConfigError
        from harness.results import RunRecord
        from harness.sweeps import sweep
        from harness.sweeps.plan import largest_first, plan
        from harness.sweeps.progress import Progress

        assert self.config is not None and self.hydra_context is not None
        assert self.composer is not None
        runs = [job.run_job for job in jobs]
        # the largest first: an array that runs array_parallelism jobs at a time ends sooner
        checkpoints = self.checkpoint_every_s is not None
        tasks = plan(runs, 1, self.max_stack, self.max_stack_s, checkpoints)
        tasks = largest_first(tasks, runs)
        executor = self.executor(f"harness-{sweep_dir.name}")  # bad parameters: nothing written
        per_job = self._start_jobs(jobs, sweep_dir)
        callbacks = self.hydra_context.callbacks

        cpus = self.params.get("cpus_per_task")
        task_runs = [[runs[i] for i in task.jobs] for task in tasks]
        try:
            submitted = executor.map_array(
                TrainTask(),
                task_runs,
                [task.stacked for task in tasks],
                # the job's cores, unless the config sets threads
                [cpus if group[0].cfg.threads is None else None for group in task_runs],
                [dict(self.config.hydra.job.env_set)] * len(tasks),
                [logging.getLogger("harness").getEffectiveLevel()] * len(tasks),
                [self.checkpoint_every_s] * len(tasks),
            )
        except (FailedJobError, FailedSubmissionError, OSError) as exc:  # sbatch refused them
            message = f"hydra/launcher=slurm: the jobs were not submitted: {_first_line(exc)}"
            raise ConfigError(message) from exc
        log.info(
            "submitted %d runs as %d %s jobs (%s), logs in %s",
            len(runs),
            len(tasks),
            self.cluster,
            ", ".join(j.job_id for j in submitted),
            self.params["submitit_folder"],
        )
        task_of = {id(job): task for job, task in zip(submitted, tasks, strict=True)}
        progress = Progress(len(runs))
        failed = []
        trained: list[dict] = [{}] * len(jobs)
        for job in as_completed(submitted, poll_frequency=POLL_S):
            task = task_of[id(job)]
            try:
                records = job.result()
            except Exception as error:  # noqa: BLE001 - reported below, in one line
                reason = _reason(error, job.state)
                failed.append((job, task, reason))
                log.error("job %s failed: %s; its log: %s", job.job_id, reason, job.paths.stderr)
                continue
            for i, record in zip(task.jobs, records, strict=True):
                trained[i] = record
            progress.done(len(task.jobs))
            for i in task.jobs if per_job else ():
                result = self._job_return(jobs[i])
                result.return_value = RunRecord(trained[i])
                config = sweep.job_config(
                    self.composer, jobs[i].num, jobs[i].sweep_overrides, sweep_dir
                )
                callbacks.on_job_end(config=config, job_return=result)
        if failed:
            job, _, reason = min(failed, key=lambda f: submitted.index(f[0]))
            untrained = sum(len(task.jobs) for _, task, _ in failed)
            message = (
                f"{len(failed)} of {len(submitted)} submitit jobs failed, {untrained} runs not "
                f"trained; job {job.job_id}: {reason}; its log: {job.paths.stderr} (the other "
                "jobs' runs are written: the same command trains what is missing)"
            )
            # Not a HarnessError: its handler would remove a new sweep folder, logs included.
            print(f"harness-train: error: {message}", file=sys.stderr)
            sys.exit(1)
        return trained
