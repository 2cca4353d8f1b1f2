"""Results on disk and as pandas tables.

A finished run's folder holds `metrics.parquet` (long format: iteration, epoch, time_s, metric,
value) and `run.json` (status, final metrics, resolved config, ...). `run.json` is written last
and atomically, so its presence is what marks a run as finished: a run killed half-way leaves
nothing that loads as a result.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

RUN_FILE = "run.json"
METRICS_FILE = "metrics.parquet"
# Config keys that say where or how fast a run executes, not what it computes: two runs that
# differ only in these are the same experiment.
EXECUTION_KEYS = ("device", "threads", "data.root", "train.progress", "train.engine")
# Columns that identify a run in every table, in this order.
ID_COLUMNS = [
    "model",
    "optimizer",
    "schedule",
    "lr",
    "momentum",
    "batch_size",
    "hidden",
    "seed",
]


def _drop_key(config: dict, dotted: str) -> None:
    *parents, leaf = dotted.split(".")
    for part in parents:
        config = config.get(part, {})
    config.pop(leaf, None)


def config_hash(config: dict) -> str:
    """A stable hash of what a run computes (execution-only keys are left out)."""
    config = json.loads(json.dumps(config))  # deep copy
    for key in EXECUTION_KEYS:
        _drop_key(config, key)
    blob = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)  # atomic on POSIX: readers see the old file or the whole new one


def write_run(run_dir: Path, record: dict[str, Any], metrics: pd.DataFrame) -> None:
    """Write a finished run: metrics first, then run.json (the completion marker)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / f".{METRICS_FILE}.tmp"
    metrics.to_parquet(tmp, index=False, compression="zstd")
    os.replace(tmp, run_dir / METRICS_FILE)
    atomic_write_bytes(run_dir / RUN_FILE, json.dumps(record, indent=2, default=str).encode())


def read_run(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / RUN_FILE).read_text())


def find_run_dirs(paths: str | Path | Iterable[str | Path]) -> list[Path]:
    """Every finished run folder under one or several paths, sorted."""
    if isinstance(paths, str | Path):
        paths = [paths]
    found: set[Path] = set()
    for path in map(Path, paths):
        if not path.exists():
            raise FileNotFoundError(f"no such results folder: {path}")
        found.update(p.parent for p in path.rglob(RUN_FILE))
    return sorted(found)


def run_identity(record: dict[str, Any]) -> dict[str, Any]:
    """The identifying columns of a run, from its run.json record."""
    config, choices = record["config"], record["choices"]
    optimizer = config["optimizer"]
    return {
        "model": choices.get("model"),
        "optimizer": choices.get("optimizer"),
        "schedule": choices.get("schedule"),
        "lr": float(optimizer["lr"]),
        "momentum": float(optimizer["momentum"]) if "momentum" in optimizer else float("nan"),
        "batch_size": int(config["train"]["batch_size"]),
        "hidden": "-".join(map(str, config["model"].get("hidden", []))) or "none",
        "seed": int(config["seed"]),
    }


def run_row(record: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    final = record["final"]
    return {
        **run_identity(record),
        "depth": len(record["config"]["model"].get("hidden", [])),
        "status": record["status"],
        "final_test_accuracy": final["test_accuracy"],
        "final_test_loss": final["test_loss"],
        "final_train_loss": final["train_loss"],
        "best_test_accuracy": final["best_test_accuracy"],
        "iterations": record["iterations"],
        "epochs": record["epochs"],
        "diverged_at": record["diverged_at"],
        "train_time_s": record["train_time_s"],
        "wall_time_s": record["wall_time_s"],
        "config_hash": record["config_hash"],
        "run_dir": str(run_dir),
    }


def load_runs(paths: str | Path | Iterable[str | Path]) -> pd.DataFrame:
    """One row per finished run found under `paths` (a run, a sweep folder, or several)."""
    rows = [run_row(read_run(d), d) for d in find_run_dirs(paths)]
    if not rows:
        return pd.DataFrame(columns=[*ID_COLUMNS, "status", "run_dir"])
    return pd.DataFrame(rows)


def load_curves(paths: str | Path | Iterable[str | Path]) -> pd.DataFrame:
    """Per-step metrics of every run under `paths`, long format, with the identifying columns:
    model, optimizer, ..., seed, status, run_dir, iteration, epoch, time_s, metric, value."""
    frames = []
    for run_dir in find_run_dirs(paths):
        record = read_run(run_dir)
        metrics = pd.read_parquet(run_dir / METRICS_FILE)
        ids = {**run_identity(record), "status": record["status"], "run_dir": str(run_dir)}
        frames.append(metrics.assign(**ids)[[*ids, *metrics.columns]])
    if not frames:
        return pd.DataFrame(columns=[*ID_COLUMNS, "status", "run_dir", "iteration", "metric"])
    return pd.concat(frames, ignore_index=True)
