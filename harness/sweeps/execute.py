"""Training a sweep's planned tasks: in this process for small sweeps, else over worker processes.

`execute_jobs` is what the sweep (harness.sweeps.callback) calls with the jobs left to train: it
plans them (harness.sweeps.plan), then trains each task, a stack (harness.stacking.stack) or a
run alone (harness.training.run). The workers are single-threaded and receive the data sets as
shared-memory tensors instead of parsing them again; they are spawned, never forked, and this
process does not initialise CUDA before it starts them. A stack computes the same bits in any
of them as here (a sweep dealt to several workers forms smaller stacks than one trained here:
other stacks).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import itertools
import logging
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.multiprocessing
from tqdm import tqdm

from harness.stacking.stack import execute_group
from harness.sweeps.plan import (
    WORKER_THRESHOLD,
    Task,
    default_workers,
    ends_before_a_checkpoint,
    estimated_seconds,
    estimated_work,
    largest_first,
    plan,
    requested_engine,
)
from harness.sweeps.progress import Progress
from harness.training import preflight, restore_probe
from harness.training import run as run_module
from harness.training.job import Job, adopt_data, load_data

log = logging.getLogger(__name__)


def _run_task(
    jobs: Sequence[Job], stacked: bool, threads: int | None, checkpoint_every_s: float | None
) -> list[dict[str, Any]]:
    if stacked:
        return execute_group(jobs, threads, checkpoint_every_s)
    job = jobs[0]
    if threads is not None:
        cfg = job.cfg.copy()
        cfg.threads = threads
        job = dataclasses.replace(job, cfg=cfg)
    return [run_module.execute_job(job, checkpoint_every_s)]


def _timed_task(
    jobs: Sequence[Job], stacked: bool, threads: int | None, checkpoint_every_s: float | None
) -> tuple[list[dict[str, Any]], float]:
    """`_run_task`'s records and the seconds it took, timed where it ran (a worker's own)."""
    start = time.perf_counter()
    records = _run_task(jobs, stacked, threads, checkpoint_every_s)
    return records, time.perf_counter() - start


def _worker_init(level: int, datasets: dict[str, Any], measured: dict) -> None:
    # Ctrl-C reaches the whole process group: the main process stops the workers (each would
    # print a traceback of its own)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # tqdm's default lock is a multiprocessing semaphore, which a worker stopped by terminate()
    # never releases: the resource tracker would warn of it after the one-line interrupt
    tqdm.set_lock(threading.RLock())
    torch.set_num_threads(1)
    logging.basicConfig(level=level, format="[%(processName)s] %(message)s")
    adopt_data(datasets)
    preflight.adopt(measured)  # checked, timed and probed here once, not per worker


def execute_jobs(
    jobs: Sequence[Job],
    workers: int | None = None,
    use_workers: bool | None = None,
    max_stack: int | None = None,
    max_stack_s: float | None = None,
    planned: Callable[[], None] | None = None,
    checkpoint_every_s: float | None = None,
) -> list[dict[str, Any]]:
    """Train a sweep's jobs with the engine each asks for and return their run.json records in
    job order. The jobs are expected to pass `run.check`. `planned` is called once the stacks
    are planned, before anything trains (the launcher keeps the probes it took for a resume).

    `workers`: worker processes (default: `default_workers`); `use_workers`: start them
    (True), don't (False), or decide from the estimated work (None); `max_stack`,
    `max_stack_s`: models per stack and its estimated seconds at most (None: no bound; see
    `plan`); `checkpoint_every_s`: seconds between a task's checkpoints (None: none), from
    which the same sweep goes on if it is stopped (harness.training.checkpoint).
    """
    jobs = list(jobs)
    if not jobs:  # e.g. every job of a resumed sweep had finished already
        return []
    if use_workers is None:
        work = sum(estimated_work(job) for job in jobs if requested_engine(job.cfg) != "single")
        use_workers = work >= WORKER_THRESHOLD
    if workers is None:  # counted only where they may start (on a GPU: its rule is logged)
        workers = default_workers(jobs, max_stack) if use_workers else 1
    use_workers = use_workers and workers > 1
    if checkpoint_every_s is not None and ends_before_a_checkpoint(jobs, checkpoint_every_s):
        checkpoint_every_s = None  # none would be saved: no probe, no runs stacked apart
    if checkpoint_every_s is not None:  # here once, not in each worker
        restore_probe.probe(jobs)
    parts = workers if use_workers else 1
    tasks = plan(jobs, parts, max_stack, max_stack_s, checkpoint_every_s is not None)
    if planned is not None:
        planned()
    records: list[dict[str, Any] | None] = [None] * len(jobs)
    log.info("training %d runs as %d tasks", len(jobs), len(tasks))
    seconds = [estimated_seconds(job) for job in jobs]
    known = all(s is not None for s in seconds)
    if known:  # what is left of a task that goes on from its checkpoint
        for task in tasks:
            for i in task.jobs:
                seconds[i] *= max(0.0, 1 - task.trained / jobs[i].run_length)
    pooled = [t for t in tasks if use_workers and not t.here]
    progress = Progress(len(jobs), costs=seconds if known else None, workers=parts)

    def cost(task: Task) -> float | None:
        return sum(seconds[i] for i in task.jobs) if known else None

    def start(task: Task) -> None:
        progress.start(id(task), cost(task))

    def record(task: Task, timed: tuple[list[dict[str, Any]], float]) -> None:
        results, took = timed
        for i, result in zip(task.jobs, results, strict=True):
            records[i] = result
        progress.done(len(task.jobs), cost(task), took, id(task))

    if pooled:
        _train_in_workers(jobs, pooled, workers, start, record, checkpoint_every_s)
    default_threads = torch.get_num_threads()
    for task in (t for t in tasks if not use_workers or t.here):
        task_jobs = [jobs[i] for i in task.jobs]
        threads = _threads_here(task, task_jobs)
        start(task)
        record(task, _timed_task(task_jobs, task.stacked, threads, checkpoint_every_s))
        torch.set_num_threads(default_threads)
    return records  # type: ignore[return-value]


def _threads_here(task: Task, jobs: list[Job]) -> int | None:
    """Threads for a task trained in this process: the config's `threads`, or for a stack one
    (the sweep is small, and a stack's small products gain little from a second thread but
    lose much when another process is busy: 4 s with 1 thread, 20 s with 2, for 8 net1 models
    x 1,500 steps on this 2-core machine under load)."""
    return 1 if task.stacked and jobs[0].cfg.threads is None else None


def _train_in_workers(
    jobs: list[Job],
    tasks: list[Task],
    workers: int,
    start: Callable[[Task], None],
    record: Callable[[Task, tuple[list[dict[str, Any]], float]], None],
    checkpoint_every_s: float | None,
) -> None:
    """Train `tasks` in `workers` single-threaded processes, largest first, tell `start` as
    each begins and `record` each as it finishes. The data sets are loaded here once and shared
    with the workers, with the optimizers' first-step checks and step times (`run.check` found
    them here)."""
    data_jobs = {jobs[i].data_key: jobs[i] for t in tasks for i in t.jobs}
    datasets = {key: load_data(job.cfg, job.problem) for key, job in data_jobs.items()}
    tasks = largest_first(tasks, jobs)
    log.info("training %d tasks in %d worker processes", len(tasks), min(workers, len(tasks)))
    context = torch.multiprocessing.get_context("spawn")  # no fork after torch started threads
    with concurrent.futures.ProcessPoolExecutor(
        max_workers=min(workers, len(tasks)),
        mp_context=context,
        initializer=_worker_init,
        initargs=(
            logging.getLogger("harness").getEffectiveLevel(),
            datasets,
            preflight.measured(),
        ),
    ) as pool:
        futures = {
            pool.submit(
                _timed_task, [jobs[i] for i in task.jobs], task.stacked, 1, checkpoint_every_s
            ): task
            for task in tasks
        }
        # the pool's workers take the tasks in the order submitted, each as it frees: the
        # first `workers` begin now, then one as each ends
        waiting = iter(tasks)
        for task in itertools.islice(waiting, workers):
            start(task)
        try:
            for future in concurrent.futures.as_completed(futures):
                record(futures[future], future.result())
                for task in itertools.islice(waiting, 1):
                    start(task)
        except KeyboardInterrupt:  # those done are written, those in training have checkpoints
            for process in list(pool._processes.values()):  # no public way to stop a task
                process.terminate()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
