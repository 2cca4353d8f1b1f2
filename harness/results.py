"""Results on disk and as pandas tables.

A finished run's folder holds `metrics.parquet` (long format: iteration, epoch, time_s, metric,
value) and `run.json` (status, final metrics, resolved config, ...). `run.json` is written last
and atomically, so its presence is what marks a run as finished: a run killed half-way leaves
nothing that loads as a result.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from harness.errors import DataError
from harness.identity import ID_COLUMNS, identity_config, identity_hash, run_identity

log = logging.getLogger(__name__)

RUN_FILE = "run.json"
METRICS_FILE = "metrics.parquet"
# Consolidated tables of a sweep folder.
RUNS_TABLE = "runs.parquet"
CURVES_TABLE = "curves.parquet"
# A sweep folder's record of its invocations (harness.sweep writes it): what each planned.
SWEEP_FILE = "sweep.json"
# What a sweep's planning measured (its checks, step times and stacking probes), kept for its
# resumes (harness.planning writes it).
PLANNING_FILE = "planning.json"
# The checkpoints of a sweep's tasks in flight (harness.checkpoint writes them).
CHECKPOINTS_FOLDER = ".checkpoints"
METRIC_COLUMNS = ["iteration", "epoch", "time_s", "metric", "value"]


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
    table = pd.read_parquet(sweep_dir / RUNS_TABLE)
    row = table[table["run_dir"] == run_dir].iloc[0]
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
        metrics = _consolidated_curves(source_dir / CURVES_TABLE).get(source_run)
        if metrics is None:
            raise DataError(f"{source_dir / CURVES_TABLE} holds no curves of run {source_run}")
    write_run(run_dir, record, metrics[METRIC_COLUMNS].reset_index(drop=True))
    return RunRecord(record)


def _consolidated_curves(path: Path) -> dict[str, pd.DataFrame]:
    stat = path.stat()
    return _curves_by_run(str(path), stat.st_mtime_ns)


@functools.lru_cache(maxsize=2)
def _curves_by_run(path: str, mtime_ns: int) -> dict[str, pd.DataFrame]:
    """A consolidated curves table split by run, read once per process (a study's reuse reads
    every run of it)."""
    curves = pd.read_parquet(path)
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
    """Every folder under `paths` that holds consolidated tables (runs.parquet)."""
    return sorted({p.parent for path in _as_list(paths) for p in path.rglob(RUNS_TABLE)})


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


def _run_curves(run_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(run_dir / METRICS_FILE).assign(run_dir=str(run_dir))


def _consolidated(paths: list[Path], table: str) -> list[pd.DataFrame]:
    """Consolidated tables under `paths`, with run_dir made a path again (stored relative to
    its sweep folder, so that committed tables stay valid wherever the repository is)."""
    frames = []
    for sweep_dir in find_sweep_dirs(paths):
        if (sweep_dir / table).exists():
            frame = pd.read_parquet(sweep_dir / table)
            frames.append(frame.assign(run_dir=[str(sweep_dir / r) for r in frame["run_dir"]]))
    return frames


def _merge(consolidated: list[pd.DataFrame], fresh: list[pd.DataFrame]) -> pd.DataFrame:
    """Per-run files win over consolidated rows of the same run (they may be newer)."""
    fresh_dirs = {d for frame in fresh for d in frame["run_dir"].unique()}
    kept = [f[~f["run_dir"].isin(fresh_dirs)] for f in consolidated]
    frames = [f for f in [*kept, *fresh] if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def load_runs(paths: str | Path | Iterable[str | Path]) -> pd.DataFrame:
    """One row per finished run found under `paths` (a run, a sweep folder, or several): from
    consolidated `runs.parquet` tables and from run folders not yet consolidated.

    Columns: the short identifying columns (ID_COLUMNS), `config_id` (runs with the same one
    are seeds of one configuration), a column per config key that differs between the loaded
    runs (dotted names, e.g. `model.activations`, `optimizer.weight_decay`; lists as strings),
    status, final metrics, times, `config` (the identity as JSON) and `run_dir`."""
    paths = _as_list(paths)
    rows = [run_row(read_run(d), d) for d in find_run_dirs(paths)]
    fresh = [pd.DataFrame(rows)] if rows else []
    runs = _merge(_consolidated(paths, RUNS_TABLE), fresh)
    if runs.empty:
        return pd.DataFrame(columns=[*ID_COLUMNS, "config_id", "status", "run_dir"])
    _require_identities(runs)
    runs = _once_each(runs)
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
    return with_config_columns(runs).sort_values([*ID_COLUMNS, "run_dir"], ignore_index=True)


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
    from hydra.utils import get_class

    target = json.loads(config_json).get(
        "problem._target_", "harness.problems.classification.Classification"
    )
    return bool(get_class(target).higher_is_better)


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


# Columns of the runs table that curves carry on every row.
_CURVE_ID_COLUMNS = [*ID_COLUMNS, "config_id", "quality", "higher_is_better", "status", "run_dir"]


def load_curves(
    paths: str | Path | Iterable[str | Path], runs: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Per-step metrics of every run under `paths`, long format, each row with its run's
    identifying columns (those of `load_runs`: short columns, config_id, the varying config
    keys), status, run_dir, then iteration, epoch, time_s, metric, value. Pass `runs` (the
    `load_runs` table of the same paths) to save reading it again."""
    paths = _as_list(paths)
    runs = load_runs(paths) if runs is None else runs
    fresh = [_run_curves(d) for d in find_run_dirs(paths)]
    curves = _merge(_consolidated(paths, CURVES_TABLE), fresh)
    columns = [*_CURVE_ID_COLUMNS, *config_keys(runs)]
    if curves.empty:
        return pd.DataFrame(columns=[*columns, *METRIC_COLUMNS])
    ids = runs[columns]
    curves = ids.merge(curves[["run_dir", *METRIC_COLUMNS]], on="run_dir", how="inner")
    if "step_time_alone_s" in runs:
        # A run's clock is its steps times its step alone where it was calibrated (a stacked
        # run's measured clock is its whole stack's): `own_step_time`.
        alone = pd.to_numeric(runs.set_index("run_dir")["step_time_alone_s"], errors="coerce")
        curves["time_s"] = (curves["iteration"] * curves["run_dir"].map(alone)).fillna(
            curves["time_s"]
        )
    return curves


def write_table(frame: pd.DataFrame, path: Path) -> None:
    """`frame` as Parquet at `path`, atomically: a reader never sees half a table."""
    tmp = path.with_name(f".{path.name}.tmp")
    frame.to_parquet(tmp, index=False, compression="zstd")
    os.replace(tmp, path)


def collect(sweep_dir: str | Path) -> tuple[int, int]:
    """Consolidate every finished run under `sweep_dir` into `runs.parquet` and `curves.parquet`
    there (rows of runs whose folders are gone are kept). Returns (runs, curve rows)."""
    sweep_dir = Path(sweep_dir)
    runs = load_runs(sweep_dir)
    curves = load_curves(sweep_dir, runs)

    def relative(frame: pd.DataFrame) -> pd.DataFrame:
        rel = [os.path.relpath(d, sweep_dir) for d in frame["run_dir"]]
        return frame.assign(run_dir=rel)

    # Stored without what loading derives again: the config-key columns (from `config`) and
    # the curves' identifying columns (from the runs table).
    write_table(relative(curves[["run_dir", *METRIC_COLUMNS]]), sweep_dir / CURVES_TABLE)
    stored = relative(runs.drop(columns=config_keys(runs)))
    write_table(stored, sweep_dir / RUNS_TABLE)  # last: it marks the sweep consolidated
    return len(runs), len(curves)
