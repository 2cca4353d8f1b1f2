"""The curves table: every run's per-step metrics in long format, each row with its run's
identifying columns, read only as far as asked (`load_curves`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from pandas.api.types import union_categoricals

from harness import storage
from harness.config.identity import ID_COLUMNS
from harness.results.records import METRICS_FILE, _as_list, find_sweep_dirs
from harness.results.runs import config_keys, load_runs
from harness.storage import METRIC_COLUMNS

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
