"""Figures and a Markdown summary of a sweep, and the `harness-report` command.

One function draws each figure; the notebooks in notebooks/ call the same functions, so a figure
looks the same in a notebook, in `harness-report`'s PNG (or SVG, PDF) files and in CI artifacts.
Every figure draws a table of `harness.analysis` (the tests compare the plotted data with it).

One module per concern (the house style, colours and axis helpers, is `harness.style`; the
Markdown writer `harness.markdown`):

- `inputs`: a sweep's tables and its tuning study (`tuning_study`); the sweep folder and
  target of the notebooks ($HARNESS_SWEEP, ...)
- `common`: `Skipped` (a figure the sweep cannot have) and `show`, for notebooks
- figures by family: `convergence`, `sensitivity` (learning rate, batch size, any other key,
  effective step), `time_to_target`, `profiles`, `tuning_curves`, `tuned_hyperparameters`
- `figures`: every figure of the report by name; `tables`: the summary's tables as text;
  `captions`: the caption under each figure; `significance`: the summary's tests against
  each net's reference (TOST, Holm and Bonferroni, bootstrap ranks, P(improvement))
- `summary`: the sweep renderer (figures + summary.md); `cli`: `harness-report`, which picks
  between it and the ESGD study's renderer (`harness.esgd.rendering.render`)

This package re-exports the names the notebooks and tests use (`report.convergence_figure`,
...). It does not import `cli`, which imports the ESGD renderer (and torch): `main` below
imports it when called.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.markdown import markdown_table
from harness.report.common import Skipped, show
from harness.report.convergence import convergence_figure, course_figure
from harness.report.cost import quality_against_step_time_figure
from harness.report.figures import (
    FIGURES,
    figure_title,
    make_figures,
    nets_of,
    tuning_curves_of,
)
from harness.report.inputs import (
    REPO,
    TuningStudy,
    default_target,
    load_sweep,
    load_sweep_runs,
    sweep_from_env,
    target_from_env,
    tuning_study,
    tuning_study_or_rates,
)
from harness.report.profiles import performance_profile_figure
from harness.report.sensitivity import (
    axis_figure,
    batch_size_figure,
    effective_step_figure,
    key_figure,
    lr_sensitivity_figure,
)
from harness.report.summary import (
    Report,
    quality_at_time_markdown,
    summary_markdown,
    tuning_markdown,
    write_report,
)
from harness.report.tables import (
    configs_table,
    final_metrics_table,
    profile_summary_table,
    reference_table,
    time_to_target_table,
)
from harness.report.time_to_target import time_to_target_by_batch_figure, time_to_target_figure
from harness.report.tuned_hyperparameters import tuned_hyperparameters_figure
from harness.report.tuning_curves import tuning_curve_figure, tuning_gain_figure
from harness.style import PROFILE_LABELS  # notebooks/summary.py reads it here

__all__ = [
    "FIGURES",
    "PROFILE_LABELS",
    "REPO",
    "Report",
    "Skipped",
    "axis_figure",
    "batch_size_figure",
    "configs_table",
    "convergence_figure",
    "course_figure",
    "default_target",
    "effective_step_figure",
    "figure_title",
    "final_metrics_table",
    "key_figure",
    "load_sweep",
    "load_sweep_runs",
    "lr_sensitivity_figure",
    "main",
    "make_figures",
    "nets_of",
    "markdown_table",
    "performance_profile_figure",
    "profile_summary_table",
    "quality_against_step_time_figure",
    "quality_at_time_markdown",
    "show",
    "summary_markdown",
    "sweep_from_env",
    "target_from_env",
    "time_to_target_by_batch_figure",
    "time_to_target_figure",
    "reference_table",
    "time_to_target_table",
    "tuned_hyperparameters_figure",
    "tuning_study",
    "tuning_study_or_rates",
    "TuningStudy",
    "tuning_curves_of",
    "tuning_curve_figure",
    "tuning_gain_figure",
    "tuning_markdown",
    "write_report",
]


def main(argv: Sequence[str] | None = None) -> None:
    """`harness-report` (harness.report.cli.main), imported only when run."""
    from harness.report.cli import main as cli_main

    cli_main(argv)
