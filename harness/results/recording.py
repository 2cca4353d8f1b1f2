"""A trained run's results, written into its folder: its record (`run.json`: status, final and
best metrics, what trained it, how long, where) and its metric rows (`metrics.parquet`)."""

from __future__ import annotations

import logging
import platform
import socket
import time
from datetime import UTC, datetime
from importlib import metadata
from typing import TYPE_CHECKING, Any

import pandas as pd
import torch
from omegaconf import OmegaConf

from harness.config.identity import config_hash
from harness.optimizers.versions import optimizer_versions
from harness.problems import Problem
from harness.results import METRIC_COLUMNS, write_run

if TYPE_CHECKING:
    from harness.loggers import Stream
    from harness.training import engine
    from harness.training.run import PreparedRun

log = logging.getLogger(__name__)

# The packages whose versions every run records (and a stored check's machine: checks.preflight)
PACKAGES = ("torch", "torchvision", "hydra-core", "numpy", "pandas", "optimizer-harness")


def package_versions() -> dict[str, str]:
    """{package: version} of python and PACKAGES ("not installed" for one that is not)."""
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def final_metrics(rows: list[tuple[int, float, float, str, float]], problem: Problem) -> dict:
    """Last evaluated values of every evaluation metric (train_*, val_*, test_*), and the best
    value of the problem's quality metric seen during the run on each held-out split
    (best_val_<quality>, best_test_<quality>), from a run's metric rows (iteration, epoch,
    time_s, metric, value)."""
    evaluations: dict[int, dict[str, float]] = {}
    for iteration, _, _, metric, value in rows:
        if metric.startswith(("train_", "val_", "test_")):
            evaluations.setdefault(iteration, {})[metric] = value
    last = max(evaluations)
    best = {}
    for split in ("val", "test"):
        quality = f"{split}_{problem.quality}"
        values = [v[quality] for v in evaluations.values() if quality in v]
        if values:
            best[f"best_{quality}"] = float(
                max(values) if problem.higher_is_better else min(values)
            )
    return {
        "iteration": int(last),
        **{metric: float(value) for metric, value in sorted(evaluations[last].items())},
        **best,
    }


def finish(
    run: PreparedRun,
    outcome: engine.Outcome,
    engine_name: str,
    update_path: str,
    stream: Stream | None = None,
) -> dict[str, Any]:
    """Write a trained run's results into its folder; returns the run.json record.
    `engine_name` (single or stacked) and `update_path` (how its optimizer updated it, see
    harness.stacking.member_optimizers) say what trained it. Its `stream` to tracking tools
    ends before run.json marks the run finished: a kill between the two leaves no tool's record
    running once the sweep resumes."""
    metrics = pd.DataFrame(outcome.recorder.rows, columns=METRIC_COLUMNS)
    config = OmegaConf.to_container(run.cfg, resolve=True)
    iterations = run.setup.schedule.iterations
    problem = run.setup.problem
    record = {
        "status": outcome.status,
        "final": final_metrics(outcome.recorder.rows, problem),
        "problem": {
            "class": f"{type(problem).__module__}.{type(problem).__qualname__}",
            "quality": problem.quality,
            "higher_is_better": problem.higher_is_better,
        },
        "diverged_at": outcome.diverged_at,
        "error": outcome.error,
        "iterations": iterations,
        "epochs": iterations / outcome.recorder.steps_per_epoch,
        "seed": run.cfg.seed,
        "choices": run.choices,
        "config_hash": config_hash(config),
        "config": config,
        "engine": engine_name,
        "update_path": update_path,
        "cuda_graph": outcome.cuda_graph,  # a stack's on CUDA: whether a graph replayed its step
        "train_time_s": outcome.train_time_s,
        "resumed_at": list(outcome.resumed_at),
        "step_time_alone_s": run.step_time_alone_s,
        "wall_time_s": time.perf_counter() - run.started + outcome.earlier_wall_s,
        "device": str(run.device),
        "threads": torch.get_num_threads(),
        "host": socket.gethostname(),
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "versions": package_versions(),
        "optimizer_versions": optimizer_versions(config),
    }
    if stream is not None:
        stream.finish(record)
    write_run(run.out_dir, record, metrics)
    final = record["final"]
    log.info(
        "%s: test %s %.4f, test loss %.4f, train loss %.4f, %.1f s -> %s",
        outcome.status,
        problem.quality,
        final[f"test_{problem.quality}"],
        final["test_loss"],
        final["train_loss"],
        record["wall_time_s"],
        run.out_dir,
    )
    return record
