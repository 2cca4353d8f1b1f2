"""A sweep's progress line: `run i of N done, elapsed ..., ~... left`."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig

from harness.results import SWEEP_FILE

log = logging.getLogger(__name__)


def format_seconds(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


class Progress:
    """Where a sweep of `total` runs stands, logged as `run i of N done, elapsed ..., ~... left`
    (extrapolated from the runs done since `started`, a time.time()): the stacked launcher
    reports its tasks as they finish, a job of any other launcher where its sweep is when it
    starts (`log_progress`). With `costs` (every run's estimated seconds) the time left is
    extrapolated from the share of the cost done, not of the runs: a zoo's first net3 stacks
    cost ten times its net1 runs (counting runs overstates the time left after the first). Where
    the tasks' own durations are given too (`done(..., seconds=)`), from the pace of the tasks
    done, spread over `workers`: the time elapsed also holds the stacks still in flight, which
    count for nothing until they end (a pace from the time elapsed overstates the time left). Tasks
    reported by `start` count, while in flight, for the part their time so far covers at that
    pace (a zoo's progress line otherwise counted each worker's stack in flight as wholly to do,
    up to one 30-minute stack per worker too much), and the time left is never less than what
    is left of the longest of them."""

    def __init__(
        self,
        total: int,
        started: float | None = None,
        costs: Sequence[float] | None = None,
        workers: int = 1,
    ) -> None:
        self.total, self.finished, self.workers = total, 0, workers
        self.started = time.time() if started is None else started
        self.cost_total, self.cost_done = (float(sum(costs)), 0.0) if costs else (None, 0.0)
        self.busy = 0.0  # seconds the finished tasks took, each on its own worker
        self.in_flight: dict[object, tuple[float, float]] = {}  # task: (its cost, started at)

    def start(self, task: object, cost: float | None, at: float | None = None) -> None:
        """`task`, of estimated `cost`, began training (now, or at time `at`)."""
        if cost is not None:
            self.in_flight[task] = (cost, time.time() if at is None else at)

    def done(
        self,
        runs: int,
        cost: float | None = None,
        seconds: float | None = None,
        task: object = None,
    ) -> None:
        """`runs` more finished, of estimated `cost`, in `task` that took `seconds`."""
        self.in_flight.pop(task, None)
        self.finished += runs
        self.cost_done += cost or 0.0
        self.busy += seconds or 0.0
        now = time.time()
        elapsed = now - self.started
        if self.cost_total and self.cost_done > 0 and self.busy > 0:
            pace = self.busy / self.cost_done  # seconds taken per estimated second
            # the part of each task in flight its time so far covers, at most all of it
            covered = {t: min(c, (now - at) / pace) for t, (c, at) in self.in_flight.items()}
            left = max(0.0, self.cost_total - self.cost_done - sum(covered.values()))
            # spread over the workers, but no sooner than the longest task in flight ends (the
            # last stacks of a sweep: fewer than the workers)
            rest = max((c - covered[t] for t, (c, _) in self.in_flight.items()), default=0.0)
            left = max(left / self.workers, rest) * pace
        else:
            if self.cost_total and self.cost_done > 0:
                share = self.cost_done / self.cost_total
            else:
                share = self.finished / self.total
            left = elapsed / share * (1 - share)
        log.info(
            "run %d of %d done, elapsed %s, ~%s left",
            self.finished,
            self.total,
            format_seconds(elapsed),
            format_seconds(left),
        )


def log_progress(hydra_cfg: DictConfig) -> None:
    """For a job of a sweep run one job at a time (joblib, submitit, SLURM: the stacked launcher
    reports its own progress), the sweep's `Progress` up to the jobs before it."""
    marker = Path(hydra_cfg.sweep.dir) / SWEEP_FILE
    if not marker.exists():  # e.g. a launcher that does not share the folder
        return
    invocation = json.loads(marker.read_text())["invocations"][-1]
    before = hydra_cfg.job.num  # jobs launched before this one
    if before > 0:
        Progress(invocation["jobs"], invocation["started_at"]).done(before)
