"""The runs table: one row per finished run, from a sweep's consolidated tables and from run
folders not yet consolidated (`load_runs`), and the consolidation itself (`collect`).
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from harness import storage
from harness.config.class_paths import DEFAULT_PROBLEM, target_object
from harness.config.identity import ID_COLUMNS, identity_config, identity_hash, run_identity
from harness.errors import DataError
from harness.results.records import (
    METRICS_FILE,
    _as_list,
    find_run_dirs,
    find_sweep_dirs,
    read_run,
)

log = logging.getLogger(__name__)


def run_row(record: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """A run's row of the runs table: identity, status, final metrics (final_<metric> for every
    metric evaluated, best_test_<quality>), lengths and times."""
    finals = {
        (k if k.startswith("best_") else f"final_{k}"): v
        for k, v in record["final"].items()
        if k != "iteration"
    }
    identity = identity_config(record["config"])
    problem = record.get("problem", {})
    return {
        **run_identity(record),
        "config_id": identity_hash(identity),
        "status": record["status"],
        # The problem's quality metric and its direction (runs recorded before problems named
        # them are the course's classification runs: accuracy, higher is better).
        "quality": problem.get("quality", "accuracy"),
        "higher_is_better": bool(problem.get("higher_is_better", True)),
        **finals,
        "iterations": record["iterations"],
        "epochs": record["epochs"],
        "diverged_at": record["diverged_at"],
        "train_time_s": record["train_time_s"],
        "wall_time_s": record["wall_time_s"],
        "engine": record.get("engine"),
        # its step alone (runs recorded before the calibration: none)
        "step_time_alone_s": record.get("step_time_alone_s"),
        "error": record.get("error"),
        "config_hash": record["config_hash"],
        "config": json.dumps(identity, sort_keys=True, default=str),
        "run_dir": str(run_dir),
    }


def steps_taken(runs: pd.DataFrame) -> pd.Series:
    """Optimizer steps each run took: all of them, or up to where it diverged."""
    return runs["diverged_at"].fillna(runs["iterations"]).astype(float)


def own_step_time(runs: pd.DataFrame) -> pd.Series:
    """Seconds per optimizer step of each run on its own: its calibration alone where it has
    one (a stacked run's training time is its whole stack's; a single run's holds the pauses of
    a shared machine, ~2x the calibration in the zoo: the two would not compare), else its
    training time over its steps (runs from before the calibration)."""
    measured = runs["train_time_s"] / steps_taken(runs)
    if "step_time_alone_s" not in runs:
        return measured
    return pd.to_numeric(runs["step_time_alone_s"], errors="coerce").fillna(measured)


def with_config_columns(runs: pd.DataFrame) -> pd.DataFrame:
    """`runs` with a column for every config key (dotted name) whose value differs between its
    runs, the seed left out; a key that some runs lack counts as differing (NaN there)."""
    configs = pd.DataFrame([json.loads(c) for c in runs["config"]], index=runs.index)
    varying = [
        k for k in configs.columns if configs[k].astype(str).nunique(dropna=False) > 1
    ]  # as text: a key missing in some runs (NaN) differs from one present everywhere
    columns = configs[sorted(varying)]
    return pd.concat([runs.drop(columns=varying, errors="ignore"), columns], axis=1)


def config_keys(frame: pd.DataFrame) -> list[str]:
    """The config-key columns of a table made by `load_runs` / `load_curves`: dotted names."""
    return [c for c in frame.columns if "." in str(c)]


def _consolidated_runs(paths: list[Path]) -> tuple[list[pd.DataFrame], set[str]]:
    """The consolidated runs tables under `paths` (each study's parts read as one), with
    run_dir made a path again (stored relative to its study, so that committed tables stay
    valid wherever the repository is), and the set of those run folders."""
    frames = []
    for sweep_dir in find_sweep_dirs(paths):
        frame = storage.read_runs(sweep_dir)
        if len(frame):
            frames.append(frame.assign(run_dir=[str(sweep_dir / r) for r in frame["run_dir"]]))
    return frames, {d for f in frames for d in f["run_dir"]}


def _fresh_run_dirs(paths: list[Path], consolidated: set[str]) -> list[Path]:
    """The finished run folders under `paths` that no consolidated table holds yet."""
    return [d for d in find_run_dirs(paths) if str(d) not in consolidated]


def load_runs(paths: str | Path | Iterable[str | Path]) -> pd.DataFrame:
    """One row per finished run found under `paths` (a run, a sweep folder, or several): from
    consolidated tables and from run folders not yet consolidated.

    Columns: the short identifying columns (ID_COLUMNS), `config_id` (runs with the same one
    are seeds of one configuration), a column per config key that differs between the loaded
    runs (dotted names, e.g. `model.activations`, `optimizer.weight_decay`; lists as strings),
    status, final metrics, times, `config` (the identity as JSON) and `run_dir`."""
    paths = _as_list(paths)
    consolidated, known = _consolidated_runs(paths)
    rows = [run_row(read_run(d), d) for d in _fresh_run_dirs(paths, known)]
    frames = [*consolidated, *([pd.DataFrame(rows)] if rows else [])]
    if not frames:
        return pd.DataFrame(columns=[*ID_COLUMNS, "config_id", "status", "run_dir"])
    runs = _table_of(pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0])
    runs = _once_each(runs)
    return with_config_columns(runs).sort_values([*ID_COLUMNS, "run_dir"], ignore_index=True)


def _table_of(runs: pd.DataFrame) -> pd.DataFrame:
    """Rows of runs (consolidated or fresh) as the runs table holds them: identities required,
    config-key columns left to `with_config_columns`, each run's own step time, and the quality
    metric and its direction filled in for tables written before runs named them."""
    _require_identities(runs)
    runs = runs.drop(columns=config_keys(runs))  # recomputed over all the loaded runs
    runs = runs.assign(step_time_s=own_step_time(runs))
    if "quality" not in runs:  # tables written before problems named their quality metric
        runs["quality"] = "accuracy"
    runs["quality"] = runs["quality"].fillna("accuracy")
    if "higher_is_better" not in runs:  # tables written before the runs table recorded it
        runs["higher_is_better"] = None
    unknown = runs["higher_is_better"].isna()
    if unknown.any():  # from the problem each run's identity names
        directions = runs.loc[unknown, "config"].map(_recorded_direction)
        runs["higher_is_better"] = runs["higher_is_better"].astype(object)
        runs.loc[unknown, "higher_is_better"] = directions
    runs["higher_is_better"] = runs["higher_is_better"].astype(bool)
    return runs


def _once_each(runs: pd.DataFrame) -> pd.DataFrame:
    """`runs` with each config and seed once: studies loaded together may hold the same run
    (two studies that share a configuration), and a seed counted twice would narrow its CI."""
    repeated = runs.duplicated(["config_id", "seed"])
    if repeated.any():
        log.warning(
            "%d runs repeat the config and seed of a run loaded already (%s): each counts once",
            int(repeated.sum()),
            runs.loc[repeated, "run_dir"].iloc[0],
        )
    return runs[~repeated]


@functools.lru_cache(maxsize=64)
def _recorded_direction(config_json: str) -> bool:
    """Whether the quality metric of the problem a run's identity names (its `problem._target_`;
    none: classification) is better higher: the problem class's own `higher_is_better`."""
    target = json.loads(config_json).get("problem._target_", DEFAULT_PROBLEM)
    return bool(target_object(target).higher_is_better)


def _require_identities(runs: pd.DataFrame) -> None:
    """Consolidated tables written before runs recorded their identity (`config`) cannot be
    summarised right: say how to add it (runs whose folders are here have it from run.json)."""
    missing = runs["config"].isna() if "config" in runs else pd.Series(True, index=runs.index)
    if missing.any():
        sweeps = sorted({str(Path(d).parent) for d in runs.loc[missing, "run_dir"]})
        raise DataError(
            f"{', '.join(sweeps)}: runs.parquet was written before runs recorded their identity; "
            f"add it with: python experiments/backfill_configs.py {sweeps[0]}"
        )


def collect(sweep_dir: str | Path) -> tuple[int, int]:
    """Consolidate the finished runs under `sweep_dir` that its tables do not hold yet into a new
    part of them (harness.storage: the runs already consolidated are not written again), under
    the study's writer lock: two consolidations of one folder write each run once.
    Returns (runs, curve rows) of its tables."""
    sweep_dir = Path(sweep_dir)
    with storage.locked(sweep_dir):
        known = set(storage.read_runs(sweep_dir, columns=["run_dir"])["run_dir"])
        fresh = [d for d in find_run_dirs(sweep_dir) if _relative(d, sweep_dir) not in known]
        if fresh:
            rows = pd.DataFrame([run_row(read_run(d), d) for d in fresh])
            runs = _table_of(rows)
            runs = runs.drop(columns=["step_time_s"]).assign(
                run_dir=[_relative(Path(d), sweep_dir) for d in runs["run_dir"]]
            )
            curves = pd.concat(
                [
                    pd.read_parquet(d / METRICS_FILE).assign(run_dir=_relative(d, sweep_dir))
                    for d in fresh
                ],
                ignore_index=True,
            )
            storage.append(sweep_dir, runs, curves)
        total = len(storage.read_runs(sweep_dir, columns=["run_dir"]))
        return total, storage.read_curves(sweep_dir, columns=[]).num_rows


def _relative(run_dir: Path, sweep_dir: Path) -> str:
    return os.path.relpath(run_dir, sweep_dir)
