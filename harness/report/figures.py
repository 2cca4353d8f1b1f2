"""Every figure of the report, by name: which function draws it from a sweep's tables, and
what it shows."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

import pandas as pd
from matplotlib.figure import Figure

from harness import analysis
from harness.report.common import Skipped, study_of
from harness.report.convergence import convergence_figure, course_figure
from harness.report.cost import quality_against_step_time_figure
from harness.report.inputs import TuningStudy
from harness.report.profiles import performance_profile_figure
from harness.report.sensitivity import (
    batch_size_figure,
    effective_step_figure,
    key_figure,
    lr_sensitivity_figure,
)
from harness.report.time_to_target import time_to_target_by_batch_figure, time_to_target_figure
from harness.report.tuned_hyperparameters import tuned_hyperparameters_figure
from harness.report.tuning_curves import tuning_curve_figure, tuning_gain_figure
from harness.style import net_order

# The course's figure of each net is named course_<net>.
COURSE_PREFIX = "course_"
COURSE_TITLE = "the course's figure of one net: every optimizer, training loss and test quality"
FIGURES = {
    "convergence_train_loss": "training loss against iterations",
    "convergence_test_accuracy": "test accuracy against iterations",
    "convergence_test_rmse": "test RMSE against iterations",
    "convergence_time": "test quality against training time",
    "lr_sensitivity": "final metrics against the learning rate",
    "batch_size": "test accuracy and training time against the batch size",
    "time_to_target_by_batch": "iterations and seconds to the target against the batch size",
    "effective_step": "test accuracy against the effective step lr / (1 - momentum)",
    "time_to_target": "iterations and seconds to the target accuracy",
    "performance_profile": "performance profiles",
    "tuned_hyperparameters": "learning rate and momentum chosen by self-tuning optimizers",
    "tuning_curves": "tuning curves: expected quality after k trials of tuning",
    "tuning_gain": "what tuning gains: each setting after one trial and after all of them",
    "quality_against_step_time": "final test error against the cost of one step alone",
}


def figure_title(name: str) -> str:
    """What a figure of the report shows (a config key's figure is named by the key)."""
    if name.startswith(COURSE_PREFIX):
        return f"{COURSE_TITLE} ({name.removeprefix(COURSE_PREFIX)})"
    return FIGURES.get(name, f"final and best test accuracy against {name}")


@analysis.remembered
def time_to_target_summary(
    runs: pd.DataFrame, curves: pd.DataFrame, target: float | None, quality: str
) -> pd.DataFrame:
    """Time to target per config; Skipped when there is no target."""
    if target is None:
        raise Skipped(f"no target for {quality} (give one with --target)")
    ttt = analysis.time_to_target(runs, curves, target)
    return analysis.summarize_time_to_target(ttt)


def figure_makers(
    runs: pd.DataFrame,
    curves: pd.DataFrame,
    target: float | None,
    tuning: TuningStudy | Skipped | None = None,
) -> dict[str, Callable[[], Figure]]:
    """Every figure of the report by name, as the function that draws it (or raises Skipped,
    which says why the sweep cannot have it); nothing is drawn or computed until one is called.
    Figures of time to target need a `target` (for accuracy, `default_target` gives one); the
    tuning curves need the sweep's tuning study (`inputs.tuning_study`)."""
    q, split = analysis.quality(runs), analysis.selection_split(curves)

    def with_target(draw: Callable[..., Figure], **kwargs) -> Callable[[], Figure]:
        def make() -> Figure:
            return draw(time_to_target_summary(runs, curves, target, q), target, **kwargs)

        return make

    def study():  # each optimizer's look and name, the same in every figure (computed once)
        return study_of(runs)

    makers = {
        f"{COURSE_PREFIX}{_file_name(net)}": functools.partial(
            lambda net: course_figure(runs, curves, net, study=study()), net
        )
        for net in nets_of(runs)
    }
    makers |= {
        "convergence_train_loss": lambda: convergence_figure(
            runs, curves, "train_loss", study=study()
        ),
        f"convergence_test_{q}": lambda: convergence_figure(
            runs, curves, f"test_{q}", study=study()
        ),
        "convergence_time": lambda: convergence_figure(
            runs, curves, f"test_{q}", x="time_s", study=study()
        ),
        "lr_sensitivity": lambda: lr_sensitivity_figure(runs, study=study()),
        "batch_size": lambda: batch_size_figure(runs, study=study()),
        "time_to_target_by_batch": with_target(time_to_target_by_batch_figure),
        "effective_step": lambda: effective_step_figure(runs),
        "time_to_target": lambda: with_target(time_to_target_figure, study=study())(),
        "performance_profile": lambda: performance_profile_figure(
            analysis.profile_tables(runs, curves, target), target, q, split, study=study()
        ),
        "tuned_hyperparameters": lambda: tuned_hyperparameters_figure(runs, curves),
        "tuning_curves": lambda: tuning_curve_figure(*tuning_curves_of(tuning)),
        "tuning_gain": lambda: tuning_gain_figure(*tuning_curves_of(tuning)),
        "quality_against_step_time": lambda: quality_against_step_time_figure(runs, study=study()),
    }
    # Any other numeric key the sweep varies (momentum, weight decay, ...) gets a figure too.
    for key in analysis.swept_keys(runs):
        if key != analysis.BATCH_KEY:
            makers[key] = lambda key=key: key_figure(runs, key, study=study())
    return makers


def drawn(make: Callable[[], Figure]) -> Figure | Skipped:
    """The figure `make` draws, or the Skipped exception that says why the sweep has none."""
    try:
        return make()
    except Skipped as exc:
        return exc


def make_figures(
    runs: pd.DataFrame,
    curves: pd.DataFrame,
    target: float | None,
    tuning: TuningStudy | Skipped | None = None,
) -> dict[str, Figure | Skipped]:
    """Every figure of the report by name (`figure_makers`), drawn, or the Skipped exception
    that says why not."""
    with analysis.shared_results():  # the tables the figures share, computed once
        makers = figure_makers(runs, curves, target, tuning)
        return {name: drawn(make) for name, make in makers.items()}


def nets_of(runs: pd.DataFrame) -> list[str]:
    """The nets of the sweep, shallowest first (their course figures come first)."""
    labelled = analysis.with_net(runs)
    return net_order(labelled.drop_duplicates("net"))


def _file_name(label: str) -> str:
    """'mlp: hidden=[100, 100]' -> 'mlp_hidden_100_100': a label as part of a file name."""
    return re.sub(r"[^A-Za-z0-9.-]+", "_", label).strip("_")


def tuning_curves_of(tuning: TuningStudy | Skipped | None) -> tuple[pd.DataFrame, str]:
    """The tuning curves of a tuning study and what its trials are (for a figure's title);
    the study's Skipped where there is none."""
    if not isinstance(tuning, TuningStudy):
        raise tuning or Skipped("not a tuning study (no tuning.json in the sweep folder)")
    return tuning.curves, tuning.trials_text()
