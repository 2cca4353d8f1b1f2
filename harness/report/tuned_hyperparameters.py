"""Tuned hyper-parameters: the learning rate and momentum that self-tuning optimizers
(YellowFin) chose at each step."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from harness import analysis
from harness.report.common import Skipped, fixed_text
from harness.style import (
    BAND_ALPHA,
    X_LABELS,
    legend_of_settings,
    line_style,
    log_label,
    log_y,
    net_order,
    net_title,
    new_figure,
    seeds_text,
    setting_order,
    setting_styles,
    styled,
    wrapped_suptitle,
)

# What a self-tuning optimizer records beside `lr` (harness.training.engine.logged_hyperparameters).
TUNED_METRICS = ("lr", "momentum")


@styled
def tuned_hyperparameters_figure(
    runs: pd.DataFrame,
    curves: pd.DataFrame,
    metrics: Sequence[str] = TUNED_METRICS,
    batch_size: int | None = None,
) -> Figure:
    """The learning rate and momentum that self-tuning optimizers (YellowFin) chose, against
    iterations: one panel per net and metric, one curve per such setting (mean over seeds, band:
    min-max). Only settings that record a momentum curve are drawn: the others follow their
    config (and their schedule)."""
    tuning = curves.loc[curves["metric"] == "momentum", "config_id"].unique()
    if not len(tuning):
        raise Skipped("no optimizer in the sweep tunes its own learning rate and momentum")
    batch_size, best = analysis.best_at_reference_batch(runs, batch_size=batch_size)
    configs = best[best["config_id"].isin(tuning)]
    if configs.empty:
        raise Skipped(f"no self-tuning optimizer at batch size {batch_size}")
    bands = {m: analysis.curve_bands(runs, curves, configs, m) for m in metrics}
    nets = net_order(configs)
    styles = setting_styles(configs)
    fig, axes = new_figure(len(nets), len(metrics), sharex="col")
    for col, net in enumerate(nets):
        for row, metric in enumerate(metrics):
            ax = axes[row, col]
            panel = bands[metric][bands[metric]["net"] == net]
            for setting in setting_order(panel):
                line = panel[panel["setting"] == setting].sort_values("iteration")
                style = styles[setting]
                ax.fill_between(
                    line["iteration"],
                    line["min"],
                    line["max"],
                    color=style["color"],
                    alpha=BAND_ALPHA,
                    lw=0,
                )
                ax.plot(line["iteration"], line["mean"], **line_style(style))
            if metric == "lr":
                log_y(ax)
            if row == 0:
                ax.set_title(net_title(configs, net))
            if row == len(metrics) - 1:
                ax.set_xlabel(X_LABELS["iteration"])
                ax.xaxis.set_major_locator(MaxNLocator(5))  # 10000 and 12500 would touch
            if col == 0:
                label = {"lr": "learning rate α", "momentum": "momentum μ"}.get(metric, metric)
                ax.set_ylabel(log_label(label) if metric == "lr" else label)
    legend_of_settings(fig, styles)
    wrapped_suptitle(
        fig,
        "Learning rate and momentum chosen by the optimizer at each step "
        f"({fixed_text(analysis.runs_of(runs, configs))})\n"
        f"line: mean over {seeds_text(configs['n_seeds'])}, band: min-max over seeds",
    )
    return fig
