"""A run's folder and record: `run.json` (status, final metrics, resolved config, ...) and
`metrics.parquet` (long format: iteration, epoch, time_s, metric, value), the names of a sweep
folder's own files, and where finished runs are found. `run.json` is written last and
atomically, so its presence is what marks a run as finished: a run killed half-way leaves
nothing that loads as a result.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from harness import storage
from harness.errors import DataError
from harness.storage import METRIC_COLUMNS, RUNS_TABLE, write_table

RUN_FILE = "run.json"


METRICS_FILE = "metrics.parquet"


# A sweep folder's record of its invocations (harness.sweeps.callback writes it): what each planned.
SWEEP_FILE = "sweep.json"


# What a sweep's preflight measured (first-step checks, step times, probes), kept for its
# resumes (harness.training.preflight writes it).
PLANNING_FILE = "planning.json"


# The checkpoints of a sweep's tasks in flight (harness.training.checkpoint writes them).
CHECKPOINTS_FOLDER = ".checkpoints"


# Metrics logged every few steps, not at evaluations: 95 % of a study's curve rows, which no
# figure of the report reads but the rates and momentum that optimizers tune themselves.
STEP_METRICS = ("batch_loss", "lr", "momentum")


def planned_by_last_invocation(sweep_dir: Path) -> int | None:
    """The runs the last invocation of the sweep in `sweep_dir` planned (its SWEEP_FILE);
    None where it has no record (a folder of tables alone)."""
    marker = sweep_dir / SWEEP_FILE
    invocations = json.loads(marker.read_text()).get("invocations") if marker.exists() else None
    return invocations[-1]["jobs"] if invocations else None


def atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)  # atomic on POSIX: readers see the old file or the whole new one


def write_run(run_dir: Path, record: dict[str, Any], metrics: pd.DataFrame) -> None:
    """Write a finished run: metrics first, then run.json (the completion marker)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    write_table(metrics, run_dir / METRICS_FILE)
    atomic_write_bytes(run_dir / RUN_FILE, json.dumps(record, indent=2, default=str).encode())


def read_run(run_dir: Path) -> RunRecord:
    return RunRecord(json.loads((run_dir / RUN_FILE).read_text()))


def read_finished(sweep_dir: Path, run_dir: str) -> RunRecord:
    """The record of a finished run of a sweep folder (`run_dir` relative to it): its run.json,
    or, where its folder is gone, what the sweep's consolidated runs table kept of it (status,
    final metrics, the problem's quality and direction, lengths and times: what a sweeper
    reads). A sweep resumed from its committed tables on another machine trains nothing twice."""
    if (sweep_dir / run_dir / RUN_FILE).exists():
        return read_run(sweep_dir / run_dir)
    table = _runs_by_folder(str(sweep_dir.resolve()), storage.stamp(sweep_dir))
    row = table.loc[run_dir]
    # as Python values (numpy's would be written to a run.json as strings)
    present = {k: v.item() if hasattr(v, "item") else v for k, v in row.items() if not _missing(v)}
    final = {
        k.removeprefix("final_"): v
        for k, v in present.items()
        if k.startswith("final_") or k.startswith("best_")
    }
    kept = ["status", "iterations", "epochs", "train_time_s", "wall_time_s", "engine"]
    kept += ["step_time_alone_s", "error", "config_hash"]
    return RunRecord(
        {k: present[k] for k in kept if k in present}
        | {
            "final": final,
            "diverged_at": present.get("diverged_at"),
            "problem": {
                "quality": present.get("quality", "accuracy"),
                "higher_is_better": bool(present.get("higher_is_better", True)),
            },
        }
    )


@functools.lru_cache(maxsize=4)
def _runs_by_folder(sweep_dir: str, stamp: tuple) -> pd.DataFrame:
    """A study's runs table by run folder, read once per process while its tables are
    unchanged (a resume or a reuse asks for thousands of its runs)."""
    return storage.read_runs(Path(sweep_dir)).set_index("run_dir", drop=False)


def copy_finished(
    source_dir: Path, source_run: str, run_dir: Path, config: dict[str, Any], choices: dict
) -> RunRecord:
    """The finished run `source_run` of the study in `source_dir` written again as the run
    folder `run_dir` of another study, which computes the same (its `config`, whose hash is the
    source run's, and config-group `choices`): its record and curves, from its folder where it
    has one, else from the source's consolidated tables; `reused_from` says where it trained."""
    record = dict(read_finished(source_dir, source_run))
    record |= {"config": config, "choices": choices, "reused_from": str(source_dir / source_run)}
    folder = source_dir / source_run
    if (folder / METRICS_FILE).exists():
        metrics = pd.read_parquet(folder / METRICS_FILE)
    else:
        metrics = _curves_by_run(str(source_dir.resolve()), storage.stamp(source_dir)).get(
            source_run
        )
        if metrics is None:
            raise DataError(f"{source_dir} holds no curves of run {source_run}")
    write_run(run_dir, record, metrics[METRIC_COLUMNS].reset_index(drop=True))
    return RunRecord(record)


@functools.lru_cache(maxsize=2)
def _curves_by_run(sweep_dir: str, stamp: tuple) -> dict[str, pd.DataFrame]:
    """A study's curves split by run, read once per process (a study's reuse reads every run
    of it)."""
    curves = storage.read_curves(Path(sweep_dir)).to_pandas()
    curves = curves.sort_values(["run_dir", "iteration"], kind="stable")
    return {str(run): frame for run, frame in curves.groupby("run_dir", sort=False)}


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


class RunRecord(dict):
    """A run's run.json record that is also its objective for a sweeper that optimises (Hydra's
    Optuna sweeper reads `float(job_return.return_value)`): `float(record)` is the run's final
    validation quality, the worst value for a run that diverged. Never a test metric: a tuning
    study without a validation split is refused before it trains (`sweep.require_validation`)."""

    def __float__(self) -> float:
        return objective(self)


def objective(record: dict[str, Any]) -> float:
    """The value a tuner optimises for a finished run: final val_<quality>; a diverged run (or
    one without a validation split) gets the worst value of its direction."""
    problem = record.get("problem", {})
    quality = problem.get("quality", "accuracy")
    higher = problem.get("higher_is_better", True)
    value = record["final"].get(f"val_{quality}")
    if record["status"] != "completed" or value is None or not math.isfinite(value):
        return -math.inf if higher else math.inf
    return float(value)


def _as_list(paths: str | Path | Iterable[str | Path]) -> list[Path]:
    paths = [paths] if isinstance(paths, str | Path) else list(paths)
    for path in map(Path, paths):
        if not path.exists():
            raise FileNotFoundError(f"no such results folder: {path}")
    return [Path(p) for p in paths]


def find_run_dirs(paths: str | Path | Iterable[str | Path]) -> list[Path]:
    """Every finished run folder under one or several paths, sorted."""
    return sorted({p.parent for path in _as_list(paths) for p in path.rglob(RUN_FILE)})


def find_sweep_dirs(paths: str | Path | Iterable[str | Path]) -> list[Path]:
    """Every folder under `paths` that holds consolidated tables (runs.parquet, or parts)."""
    found = set()
    for path in _as_list(paths):
        found |= {p.parent for p in path.rglob(RUNS_TABLE)}
        found |= {
            p.parent.parent for p in path.rglob(f"{storage.PARTS_FOLDER}/*{storage.RUNS_SUFFIX}")
        }
    return sorted(found)
