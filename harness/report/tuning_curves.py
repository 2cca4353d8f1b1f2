"""Tuning curves: the expected quality of the trial picked among k trials of a tuning study
(the table of harness.tuning_curves), against k."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from harness.report.common import Skipped
from harness.style import (
    SPLIT_NAMES,
    figure_legend,
    is_percent,
    log_label,
    log_y,
    net_order,
    net_title,
    new_figure,
    setting_order,
    setting_styles,
    styled,
)


@styled
def tuning_curve_figure(curves: pd.DataFrame) -> Figure:
    """Tuning curves (harness.tuning_curves): per net, the expected final validation quality of
    the trial picked among k random trials of each setting's tuning study (solid), and the
    expected test quality of that same pick (dashed), against k. Accuracies as error rates
    (100 - accuracy, %) on a log axis, so that the last tenths of a per cent stay apart."""
    if curves.empty or curves["n_trials"].max() < 2:
        raise Skipped("no setting has two trials or more: there is no tuning curve to draw")
    val_metric = curves["val_metric"].iloc[0]
    chooser = SPLIT_NAMES[val_metric.split("_")[1]]  # validation (test for runs without one)
    percent = is_percent(val_metric.removeprefix("final_"))
    nets = net_order(curves)
    styles = setting_styles(curves)
    n = int(curves["n_trials"].max())
    fig, axes = new_figure(len(nets), sharey=True)
    for ax, net in zip(axes[0], nets, strict=True):
        panel = curves[curves["net"] == net]
        for setting in setting_order(panel):
            line = panel[panel["setting"] == setting].sort_values("k")
            style = styles[setting]
            untuned = len(line) == 1  # nothing to tune (YellowFin): its one trial at any k
            ks = [1, n] if untuned else line["k"]
            for column, ls in (("expected_val", "-"), ("expected_test", "--")):
                values = line[column].to_numpy()
                y = (1 - values) * 100 if percent else values
                y = np.repeat(y, 2) if untuned else y
                marker = None if untuned else style["marker"]
                ax.plot(ks, y, color=style["color"], ls=ls, marker=marker, ms=3.5, lw=1.4)
        ax.set_title(net_title(curves, net))
        ax.set_xlabel("trials k (of the tuning budget)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        log_y(ax)
    what = "error (100 − accuracy, %)" if percent else val_metric.removeprefix("final_val_")
    axes[0, 0].set_ylabel(log_label(f"final {what}"))
    handles = [Line2D([], [], color=styles[s]["color"], marker=styles[s]["marker"]) for s in styles]
    labels = list(styles)
    handles += [Line2D([], [], color="black", ls="-"), Line2D([], [], color="black", ls="--")]
    labels += [f"{chooser} (chooses)", "test (reports)"]
    figure_legend(fig, handles, labels)
    fig.suptitle(
        f"Tuning curves: the trial picked among k of {n} by final {chooser} "
        f"{'accuracy' if percent else what},\nexpected over random orders of the trials; "
        f"solid: its {chooser} error, dashed: its test error\n"
        "(a setting with one trial has nothing to tune: a flat line)"
    )
    return fig
