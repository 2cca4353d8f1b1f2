"""Results on disk and as pandas tables.

A finished run's folder holds `metrics.parquet` (long format: iteration, epoch, time_s, metric,
value) and `run.json` (status, final metrics, resolved config, ...). `run.json` is written last
and atomically, so its presence is what marks a run as finished: a run killed half-way leaves
nothing that loads as a result.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pandas.api.types import union_categoricals

from harness import storage
from harness.config.identity import ID_COLUMNS, identity_config, identity_hash, run_identity
from harness.config.targets import DEFAULT_PROBLEM, target_object
from harness.errors import DataError
from harness.storage import CURVES_TABLE, METRIC_COLUMNS, RUNS_TABLE, write_table

__all__ = ["CURVES_TABLE", "METRIC_COLUMNS", "RUNS_TABLE", "write_table"]  # re-exported

log = logging.getLogger(__name__)

RUN_FILE = "run.json"
METRICS_FILE = "metrics.parquet"
# A sweep folder's record of its invocations (harness.sweeps.sweep writes it): what each planned.
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


# Columns of the runs table that curves carry on every row (others on request).
CURVE_ID_COLUMNS = [*ID_COLUMNS, "config_id", "quality", "higher_is_better", "status", "run_dir"]


def load_curves(
    paths: str | Path | Iterable[str | Path],
    runs: pd.DataFrame | None = None,
    metrics: Iterable[str] | None = None,
    skip: Iterable[str] = (),
    columns: Iterable[str] | None = None,
) -> pd.DataFrame:
    """Per-step metrics of the runs under `paths`, long format, each row with its run's short
    identifying columns (CURVE_ID_COLUMNS: model, optimizer, ..., seed, config_id, quality,
    higher_is_better, status, run_dir), then iteration, epoch, time_s, metric, value.

    Only what is asked is read: the `metrics` named (None: all) but those in `skip` (a figure of
    test accuracy need not read the batch losses: skip=STEP_METRICS) of the runs in `runs` (the
    `load_runs` table of the same paths, or any subset of it; None: all), the filter pushed
    into the Parquet scan; and the `columns` named (None: CURVE_ID_COLUMNS and METRIC_COLUMNS;
    iteration, metric and value always), among them any config-key column of `runs`
    (`config_keys`: a zoo's runs vary 215 keys, which would be 215 more columns on each of its
    5 million rows). A run's columns are joined by its row, as categories where they are text.
    Rows come in the order of `runs`, each run's by iteration."""
    paths = _as_list(paths)
    runs = load_runs(paths) if runs is None else runs
    wanted = None if metrics is None else list(metrics)
    every = [*CURVE_ID_COLUMNS, *config_keys(runs)]
    asked = set(CURVE_ID_COLUMNS + METRIC_COLUMNS if columns is None else columns)
    columns = [c for c in every if c in asked]
    measured = [c for c in METRIC_COLUMNS if c in asked | {"iteration", "metric", "value"}]
    position = pd.Series(range(len(runs)), index=runs["run_dir"].astype(str))
    parts, found = [], []
    for sweep_dir in find_sweep_dirs(paths):
        prefix = f"{sweep_dir}{os.sep}"
        relative = [r[len(prefix) :] for r in position.index if r.startswith(prefix)]
        if not relative:
            continue
        table = storage.read_curves(sweep_dir, wanted, relative, skip, measured)
        parts.append(_arrays(table, measured, _positions(table["run_dir"], prefix, position)))
        found.append(sweep_dir)
        del table  # its columns live on in the arrays, until each is placed
        pa.default_memory_pool().release_unused()
    consolidated = {r for r in position.index if any(r.startswith(f"{d}{os.sep}") for d in found)}
    for run_dir in position.index.difference(list(consolidated)):
        if (Path(run_dir) / METRICS_FILE).exists():
            frame = pd.read_parquet(Path(run_dir) / METRICS_FILE)
            if wanted is not None:
                frame = frame[frame["metric"].isin(wanted)]
            frame = frame[~frame["metric"].isin(list(skip))]
            table = pa.Table.from_pandas(frame[measured], preserve_index=False)
            rows = np.full(len(frame), position[run_dir], np.int32)
            parts.append(_arrays(table, measured, rows))
    parts = [p for p in parts if len(p["_row"])]
    if not parts:
        return pd.DataFrame(columns=[*columns, *measured])
    return _assembled(parts, runs, columns, measured)


def _arrays(table: pa.Table, measured: list[str], rows: np.ndarray) -> dict[str, Any]:
    """A curves table's columns as numpy arrays (the metric as its names and their codes), with
    each row's row in the runs table."""
    arrays: dict[str, Any] = {"_row": rows}
    for name in measured:
        column = table[name]
        if name == "metric":
            encoded = column.combine_chunks()
            if not isinstance(encoded, pa.DictionaryArray):
                encoded = encoded.dictionary_encode()
            arrays["metric"] = (encoded.dictionary.to_pylist(), encoded.indices.to_numpy())
        else:
            arrays[name] = column.to_numpy()
    return arrays


def _assembled(
    parts: list[dict], runs: pd.DataFrame, columns: list[str], measured: list[str]
) -> pd.DataFrame:
    """The curves of `parts` (`_arrays`) with each run's `columns` joined by its row, in the order
    of `runs` and, within a run, of iterations; built a column at a time, each read array let go
    once it is placed (a zoo's 5 million rows: the whole table is never copied)."""
    rows = _joined([p.pop("_row") for p in parts])
    order = np.lexsort((_joined([p["iteration"] for p in parts]), rows)).astype(np.int32)
    if rows.min(initial=0) < 0:  # rows of runs not asked for (the dictionary's others)
        order = order[rows[order] >= 0]
    rows = rows[order]
    out: dict[str, Any] = {}
    ids = _compact(runs[columns])
    for name in columns:
        column = ids[name]
        if isinstance(column.dtype, pd.CategoricalDtype):
            codes = column.cat.codes.to_numpy()[rows]
            out[name] = pd.Categorical.from_codes(codes, dtype=column.dtype)
        else:
            out[name] = column.to_numpy()[rows]
    names = sorted({n for p in parts for n in p["metric"][0]})
    for name in measured:
        if name == "metric":
            codes = _joined(
                [
                    np.searchsorted(names, p["metric"][0]).astype(np.int16)[p["metric"][1]]
                    for p in parts
                ]
            )
            out[name] = pd.Categorical.from_codes(codes[order], categories=names)
        else:
            out[name] = _joined([p.pop(name) for p in parts])[order]
    if "step_time_alone_s" in runs and "time_s" in out:
        # A run's clock is its steps times its step alone where it was calibrated (a stacked
        # run's measured clock is its whole stack's): `own_step_time`.
        alone = pd.to_numeric(runs["step_time_alone_s"], errors="coerce").to_numpy(float)[rows]
        clock = np.multiply(out["iteration"], alone, out=alone)  # in place: 5 million rows
        np.copyto(clock, out["time_s"], where=np.isnan(clock))
        out["time_s"] = clock
    return pd.DataFrame(out, copy=False)


def _joined(arrays: list[np.ndarray]) -> np.ndarray:
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def concat_curves(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Curves of `load_curves` read in several calls, as one table: their text columns stay
    categories (pandas' concat would turn categories that differ into Python strings)."""
    frames = [f for f in frames if len(f)]
    if len(frames) < 2:
        return frames[0] if frames else pd.DataFrame()
    joined = pd.concat(frames, ignore_index=True)
    for column in frames[0].columns:
        if column in joined and all(
            column in f and isinstance(f[column].dtype, pd.CategoricalDtype) for f in frames
        ):
            parts = [f[column] for f in frames]
            with contextlib.suppress(TypeError):  # categories of other types: left as values
                joined[column] = union_categoricals(parts, sort_categories=True, ignore_order=True)
    return joined


def _positions(run_dirs: pa.ChunkedArray, prefix: str, position: pd.Series) -> np.ndarray:
    """Each curve row's row in the runs table (-1: a run not asked for), through the run_dir
    dictionary: one lookup per run, not per row."""
    rows = []
    for chunk in run_dirs.chunks:
        if not isinstance(chunk, pa.DictionaryArray):
            chunk = chunk.dictionary_encode()
        names = chunk.dictionary.to_pylist()
        lookup = position.reindex([prefix + n for n in names]).fillna(-1).to_numpy(np.int32)
        rows.append(lookup[chunk.indices.to_numpy(zero_copy_only=False)])
    return np.concatenate(rows) if rows else np.zeros(0, np.int32)


def _compact(ids: pd.DataFrame) -> pd.DataFrame:
    """The runs' identifying columns, text as categories (a category per value, in sorted
    order: sorting them sorts as the text does)."""
    out = {}
    for name, column in ids.items():
        text = column.dtype == object or pd.api.types.is_string_dtype(column.dtype)
        if text and not isinstance(column.dtype, pd.CategoricalDtype):
            values = column.dropna().unique()
            try:
                categories = sorted(values)
            except TypeError:  # mixed types (a key some runs lack): leave the column as it is
                out[name] = column
                continue
            out[name] = pd.Categorical(column, categories=categories)
        else:
            out[name] = column
    return pd.DataFrame(out, index=ids.index)


def collect(sweep_dir: str | Path) -> tuple[int, int]:
    """Consolidate the finished runs under `sweep_dir` that its tables do not hold yet into a new
    part of them (harness.storage: the runs already consolidated are not written again).
    Returns (runs, curve rows) of its tables."""
    sweep_dir = Path(sweep_dir)
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
    rows_total = sum(pq.ParquetFile(f).metadata.num_rows for f in storage.curves_files(sweep_dir))
    return total, rows_total


def _relative(run_dir: Path, sweep_dir: Path) -> str:
    return os.path.relpath(run_dir, sweep_dir)
