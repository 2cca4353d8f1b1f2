"""What a report and the notebooks read: a sweep folder's tables, the tuning study its tuning
curves come from, and, for the notebooks, the sweep and the target from the environment."""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness import analysis
from harness.analysis import LR_KEY
from harness.report.common import Skipped
from harness.results import (
    STEP_METRICS,
    concat_curves,
    load_curves,
    load_runs,
)
from harness.tuning import tuning_curves
from harness.tuning.lineage import CIRCLE, DREW, MISSING, UNTUNED, lineage

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


def load_sweep_runs(sweep: str | Path) -> pd.DataFrame:
    """The runs table of a sweep folder; ValueError when it holds no run."""
    runs = load_runs(Path(sweep))
    if runs.empty:
        raise ValueError(
            f"no runs in {sweep} (expected runs.parquet, or run folders with run.json)"
        )
    return runs


def load_sweep(sweep: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, curves) of a sweep folder, the curves as the report reads them (`report_curves`);
    ValueError when it holds no run."""
    runs = load_sweep_runs(sweep)
    return runs, report_curves(sweep, runs)


def report_curves(sweep: str | Path, runs: pd.DataFrame) -> pd.DataFrame:
    """The curves the report's figures read: every metric evaluated (the batch losses and rates
    logged every few steps, 95 % of a study's rows, left out), and the rate and momentum of the
    runs whose optimizer tunes them itself (YellowFin: they log a momentum); each row with its
    run's short identity (the labels read the runs table's config keys)."""
    curves = load_curves(sweep, runs, skip=STEP_METRICS)
    tuners = load_curves(sweep, runs, metrics=["momentum"], columns=["run_dir"])["run_dir"]
    if not len(tuners):
        return curves
    tuned = runs[runs["run_dir"].isin(set(tuners))]
    return concat_curves([curves, load_curves(sweep, tuned, ["lr", "momentum"])])


def sweep_from_env(study: str | None = None) -> Path:
    """The sweep folder of the notebooks: $HARNESS_SWEEP, else the committed results/<study>
    (results/course by default)."""
    default = REPO / "results" / study if study else DEFAULT_SWEEP
    return Path(os.environ.get(SWEEP_ENV) or default)


def target_from_env(quality: str = "accuracy") -> float | None:
    """The target of time-to-target: $HARNESS_TARGET, else `default_target(quality)`."""
    value = os.environ.get(TARGET_ENV)
    return float(value) if value else default_target(quality)


@dataclass(frozen=True)
class TuningStudy:
    """The trials tuning curves are drawn from: a tuning study's folder, the keys it tuned and
    its runs (with their curves, read once: a run that ended early is scored at its start)."""

    sweep: Path
    keys: list[str]
    runs: pd.DataFrame

    @functools.cached_property
    def trial_curves(self) -> pd.DataFrame:
        """What its tuning curves read of its trials' curves, read once: the start of the runs
        that ended early (`tuning_curves.scored_at_start`), in the metrics that score them."""
        ended = self.runs[analysis.ended_early(self.runs)]
        scores = (analysis.selection_metric(self.runs), analysis.final_quality(self.runs))
        metrics = [m.removeprefix("final_") for m in scores]
        return load_curves(self.sweep, ended, metrics=metrics)

    @functools.cached_property
    def curves(self) -> pd.DataFrame:
        """Its tuning curves (`harness.tuning.tuning_curves`), computed once for every figure and
        table that reads them."""
        return tuning_curves.tuning_curves(self.runs, self.trial_curves, tune=self.keys)

    def trials_text(self, folder: str | None = None) -> str:
        """'trials of 2,000 iterations in zoo_tune': what its tuning curves count (`folder`: how
        to name the study, default the folder's name)."""
        configs = self.runs.get("config", pd.Series(dtype=object))
        length = configs.map(lambda c: json.loads(c).get("train.iterations"))
        lengths = " or ".join(f"{int(n):,}" for n in sorted(length.dropna().unique()))
        folder = folder or self.sweep.name
        return f"trials of {lengths} iterations in {folder}" if lengths else f"trials in {folder}"


def tuning_study(sweep: Path, runs: pd.DataFrame | None = None) -> TuningStudy | Skipped:
    """The study of `sweep`'s tuning curves: its own trials where it drew them (a tuning study of
    random or grid trials: its tuning.json); where its values came from an earlier study, that
    study's, followed back (`harness.tuning.lineage`): a shortlist's trials are an earlier
    study's best (not draws, so a curve over them would flatter every optimizer), and an
    evaluation phase (`${tuned:}`, its tune.source in multirun.yaml) trained one pick per
    setting. Skipped (why) where the sweep tuned nothing or its source is not here: beside the
    sweep, or a folder as given. `runs`: the sweep's, where the caller has read them already."""
    traced = lineage(sweep)
    last = traced.last.folder
    if traced.end == DREW:
        own = runs if runs is not None and last == sweep else load_runs(last)
        return TuningStudy(last, traced.last.protocol["tuned_keys"], own)
    if traced.end == MISSING:
        return Skipped(f"the tuning study of {last}, {traced.missing}, is not here")
    if traced.end == CIRCLE:
        return Skipped(f"the tuning studies of {sweep} name each other in a circle")
    why = "no tuning.json in the sweep folder, no tune.source"
    followed = f"{last}, where {sweep}'s values came from, is " if last != sweep else ""
    return Skipped(f"{followed}not a tuning study ({why})")


def tuning_study_or_rates(sweep: Path, runs: pd.DataFrame) -> TuningStudy:
    """For the notebooks: `tuning_study`, or where the sweep tuned nothing (a grid of rates, a
    smoke sweep: no tuning.json, no tune.source), its own `runs` as trials of the learning
    rate. Raises the Skipped where its tuning study is missing: a shortlist's own trials would
    flatter every optimizer, and an evaluation's are one pick per setting."""
    traced = lineage(sweep)
    if traced.end == UNTUNED and len(traced.studies) == 1:
        return TuningStudy(sweep, [LR_KEY], runs)
    study = tuning_study(sweep, runs)
    if isinstance(study, Skipped):
        raise study
    return study
