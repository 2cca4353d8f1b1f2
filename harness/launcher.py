"""Sweeps through the stacked engine: the jobs of a Hydra sweep are collected instead of run
one by one, grouped by what they share, and each group is trained as one stacked model.

The Hydra side is `hydra_plugins.harness_launcher.StackedLauncher` (`hydra/launcher=stacked`):
it runs every job through Hydra's own `run_job` (output folders, saved configs, callbacks and
the app's resume check all stay as in any sweep), inside `deferring()`, where the app hands
stacked-engine jobs to `defer()` instead of training them. The launcher then calls
`train_deferred`, which hands them to harness.stacked.execute_jobs (grouping, worker processes).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf


@dataclass
class DeferredJob:
    index: int  # position in the launcher's batch
    cfg: DictConfig  # fully resolved: it no longer needs Hydra's runtime to be read
    out_dir: Path
    choices: dict[str, str]


_pending: list[DeferredJob] | None = None


@contextmanager
def deferring() -> Iterator[list[DeferredJob]]:
    """While active, `defer()` collects jobs instead of letting them train."""
    global _pending
    _pending = []
    try:
        yield _pending
    finally:
        _pending = None


def is_deferring() -> bool:
    return _pending is not None


def defer(cfg: DictConfig, out_dir: Path, choices: dict[str, str]) -> bool:
    """Hand a job to the stacked launcher; False when no launcher collects jobs (train now)."""
    if _pending is None or cfg.train.engine == "single":
        return False
    resolved = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    _pending.append(DeferredJob(len(_pending), resolved, out_dir, dict(choices)))
    return True


def train_deferred(jobs: list[DeferredJob], n_jobs: int) -> dict[int, dict]:
    """Train the collected jobs (stacked where they can be, over `n_jobs` single-threaded worker
    processes; -1: one per core); returns {job index: run.json record}."""
    from harness.stacked import execute_jobs  # torch is imported only when jobs train

    records = execute_jobs(
        [(job.cfg, job.out_dir, job.choices) for job in jobs],
        workers=None if n_jobs < 1 else n_jobs,
    )
    return {job.index: record for job, record in zip(jobs, records, strict=True)}
