"""What a report and the notebooks read: a sweep folder's tables, the keys a tuning study
tuned, and, for the notebooks, the sweep and the target from the environment."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from harness.results import load_curves, load_runs
from harness.search import PROTOCOL_FILE

REPO = Path(__file__).resolve().parents[2]
# The course results, committed; the default sweep of the notebooks.
DEFAULT_SWEEP = REPO / "results" / "course"
SWEEP_ENV = "HARNESS_SWEEP"
TARGET_ENV = "HARNESS_TARGET"
DEFAULT_TARGET = 0.97


def default_target(quality: str) -> float | None:
    """The target of time-to-target when none is given: 97 % for accuracy; none otherwise (a
    good RMSE depends on the data)."""
    return DEFAULT_TARGET if quality == "accuracy" else None


def checked_target(target: float | None, quality: str) -> float | None:
    """`target` (default: `default_target`) checked against the range of the runs' quality
    metric: an accuracy is a fraction in (0, 1]; any other quality (an RMSE) a value > 0.
    ValueError (one line) otherwise."""
    if target is None:
        return default_target(quality)
    if quality == "accuracy" and not 0 < target <= 1:
        raise ValueError(f"--target is an accuracy here, a fraction in (0, 1]; got {target}")
    if not target > 0:
        raise ValueError(f"--target is a {quality} here, a value > 0; got {target}")
    return target


def load_sweep(sweep: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, curves) of a sweep folder; ValueError when it holds no run."""
    runs = load_runs(Path(sweep))
    if runs.empty:
        raise ValueError(
            f"no runs in {sweep} (expected runs.parquet, or run folders with run.json)"
        )
    return runs, load_curves(sweep, runs)


def sweep_from_env(study: str | None = None, variable: str = SWEEP_ENV) -> Path:
    """The sweep folder of the notebooks: $HARNESS_SWEEP (or another `variable`: the zoo
    notebook's tuning study is $HARNESS_TUNING_SWEEP), else the committed results/<study>
    (results/course by default)."""
    default = REPO / "results" / study if study else DEFAULT_SWEEP
    return Path(os.environ.get(variable) or default)


def target_from_env(quality: str = "accuracy") -> float | None:
    """The target of time-to-target: $HARNESS_TARGET, else `default_target(quality)`."""
    value = os.environ.get(TARGET_ENV)
    return float(value) if value else default_target(quality)


def tuned_keys_of(sweep: Path) -> list[str] | None:
    """The keys a tuning study tuned (its tuning.json: hydra/sweeper=tune), or None."""
    protocol = sweep / PROTOCOL_FILE
    return json.loads(protocol.read_text())["tuned_keys"] if protocol.exists() else None
