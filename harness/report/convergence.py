"""Convergence: a metric against iterations, epochs or training time, one curve per setting
at its best learning rate."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from matplotlib.transforms import offset_copy

from harness import analysis
from harness.report.common import Skipped, fixed_text
from harness.style import (
    BAND_ALPHA,
    LEGEND_DROP_PT,
    LOSS_NAMES,
    METRIC_LABELS,
    X_LABELS,
    is_percent,
    log_label,
    log_y,
    logit_percent_y,
    lr_text,
    net_order,
    net_title,
    new_figure,
    scale,
    seeds_text,
    setting_order,
    setting_styles,
    styled,
)


@styled
def convergence_figure(
    runs: pd.DataFrame,
    curves: pd.DataFrame,
    metric: str = "train_loss",
    x: str = "iteration",
    batch_size: int | None = None,
    by: str | None = None,
    accuracy_scale: str = "logit",
) -> Figure:
    """One panel per net, one curve per setting (each optimizer, and any other key that varies)
    at its best learning rate (by `by`, mean over seeds): `metric` against `x` (iteration, epoch
    or time_s), the mean over seeds as a line and their min-max as a band. Losses on a log
    scale; accuracies in % on a logit scale (default: it spreads out both the first rise from
    10 % and the last tenths of a per cent; or "linear"). A curve with a diverged seed ends
    where that seed stopped, marked with a cross."""
    if curves.empty or not (curves["metric"] == metric).any():
        raise Skipped(f"the sweep has no '{metric}' curves")
    batch_size, configs = analysis.best_at_reference_batch(runs, by, batch_size)
    bands = analysis.curve_bands(runs, curves, configs, metric, x)
    if bands.empty:
        raise Skipped(f"no '{metric}' curves at batch size {batch_size}")
    k = scale(metric)
    nets = net_order(bands)
    styles = setting_styles(bands)
    tuning = set(curves.loc[curves["metric"] == "momentum", "config_id"])  # they set their lr
    fig, axes = new_figure(len(nets), sharey=False)
    for ax, net in zip(axes[0], nets, strict=True):
        panel = bands[bands["net"] == net]
        handles, labels = [], []
        for setting in setting_order(panel):
            line = panel[panel["setting"] == setting].sort_values(x)
            style = styles[setting]
            ax.fill_between(
                line[x],
                line["min"] * k,
                line["max"] * k,
                color=style["color"],
                alpha=BAND_ALPHA,
                lw=0,
            )
            (handle,) = ax.plot(
                line[x], line["mean"] * k, color=style["color"], ls=style["ls"], lw=1.6
            )
            first = line.iloc[0]
            tuned = first["config_id"] in tuning
            label = f"{setting}, lr {'tuned' if tuned else lr_text(first['lr'])}"
            if first["n_diverged"]:
                ax.plot(
                    line[x].iloc[-1:], line["mean"].iloc[-1:] * k, "x", color=style["color"], ms=8
                )
                label += f" ({first['n_diverged']}/{first['n_seeds']} diverged)"
            handles.append(handle)
            labels.append(label)
        ax.set_title(net_title(bands, net))
        ax.set_xlabel(X_LABELS.get(x, x))
        ax.xaxis.set_major_locator(MaxNLocator(5))  # long runs: 20000 needs room
        if not is_percent(metric):
            log_y(ax)
        elif accuracy_scale == "logit":
            logit_percent_y(ax, panel[["min", "max"]].to_numpy() * k)
        ax.legend(
            handles,
            labels,
            loc="upper center",
            # Below the tick labels and the x label, whatever the panel's height (a fraction
            # of the axes would cover the label of a short panel).
            bbox_to_anchor=(0.5, 0),
            bbox_transform=offset_copy(ax.transAxes, fig=fig, y=-LEGEND_DROP_PT, units="points"),
            ncols=1 if len(handles) > 3 else len(handles),
            frameon=False,
            fontsize=8.5,
            handlelength=2.2,
        )
    ylabel = METRIC_LABELS.get(metric, metric)
    if is_percent(metric) and accuracy_scale == "logit":
        ylabel = ylabel.replace("(%)", "(%, logit scale)")
    elif not is_percent(metric):
        ylabel = log_label(ylabel)
    axes[0, 0].set_ylabel(ylabel)
    name = METRIC_LABELS.get(metric, metric).split(" (")[0]
    if "loss" in metric:
        name += f" ({LOSS_NAMES.get(analysis.quality(runs), 'loss')})"
    fig.suptitle(
        f"{name.capitalize()} against {x.replace('_s', '')}s: each setting at its best "
        f"learning rate, {analysis.selection_text(runs)} "
        f"({fixed_text(analysis.runs_of(runs, configs))})\n"
        f"line: mean over {seeds_text(bands['n_seeds'])}, band: min-max over seeds"
    )
    return fig
