"""Time to a target: iterations and training seconds until the quality first reaches a
target, per setting and against the batch size."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from harness import analysis
from harness.report.common import Skipped, target_split
from harness.report.sensitivity import axis_figure
from harness.style import (
    TARGET_LABELS,
    lr_text,
    net_order,
    net_title,
    new_figure,
    optimizer_color,
    seeds_text,
    setting_order,
    styled,
    target_text,
)


@styled
def time_to_target_figure(
    target_summary: pd.DataFrame,
    target: float,
    measures: Sequence[str] = ("iterations_to_target", "seconds_to_target"),
) -> Figure:
    """Horizontal bars: per net (panel column) and setting, the iterations and training
    seconds until the quality (on the split `target_summary` was measured on: validation when
    the runs have it) first reaches `target` at the fastest learning rate (mean over seeds,
    min-max error bars); 'not reached' where no learning rate got there with every seed."""
    quality, split = analysis.quality(target_summary), target_split(target_summary)
    if target_summary.empty or target_summary["n_reached"].sum() == 0:
        raise Skipped(f"no run reached {target_text(target, quality, split)}")
    nets = net_order(target_summary)
    fig, axes = new_figure(len(nets), len(measures))
    # a bar's label needs its line: panels grow with the settings they list
    bars = int(target_summary.groupby("net")["setting"].nunique().max())
    fig.set_figheight(max(fig.get_figheight(), len(measures) * (0.22 * bars + 1.0) + 0.9))
    for row, measure in enumerate(measures):
        fastest = analysis.fastest_configs(target_summary, measure)
        for col, net in enumerate(nets):
            ax = axes[row, col]
            panel = fastest[fastest["net"] == net]
            names = setting_order(panel)
            panel = panel.set_index("setting").loc[names]
            done = np.isfinite(panel[f"{measure}_cost"].to_numpy())
            mean = panel[f"{measure}_mean"].where(done, 0.0)
            lo = (mean - panel[f"{measure}_min"]).where(done, 0.0)
            hi = (panel[f"{measure}_max"] - mean).where(done, 0.0)
            ys = np.arange(len(names))
            ax.barh(
                ys,
                mean,
                xerr=[lo, hi],
                color=[optimizer_color(o) for o in panel["optimizer"]],
                capsize=3,
                height=0.65,
                error_kw={"lw": 1},
            )
            for y, name, ok in zip(ys, names, done, strict=True):
                lr = lr_text(panel.loc[name, "lr"])
                text = f" lr {lr}" if ok else " not reached"
                ax.text(0, y, text, va="center", ha="left", fontsize=8, color="black")
            ax.set_yticks(ys, names)
            ax.invert_yaxis()
            ax.grid(axis="y", visible=False)
            ax.set_xlabel(
                TARGET_LABELS.get(measure, measure) + (" (s)" if "seconds" in measure else "")
            )
            if row == 0:
                ax.set_title(net_title(target_summary, net))
            if not done.any():
                ax.set_xlim(0, 1)
                ax.set_xticks([])
    fig.suptitle(
        f"Time to {target_text(target, quality, split)} at each setting's "
        "fastest learning rate\n"
        f"mean over {seeds_text(target_summary['n_seeds'])}, error bars: min-max over seeds "
        "(resolution: the evaluation interval)"
    )
    return fig


def time_to_target_by_batch_figure(
    target_summary: pd.DataFrame,
    target: float,
    measures: Sequence[str] = ("iterations_to_target", "seconds_to_target"),
) -> Figure:
    """Iterations and training seconds to `target` quality (on the split the table was measured
    on) against the batch size, each setting at its fastest learning rate per batch size; batch
    sizes where no learning rate got there with every seed are left out of the line."""
    if target_summary.empty or target_summary["batch_size"].nunique() < 2:
        raise Skipped("the sweep has a single batch size: no batch-size axis")
    reached = target_text(target, analysis.quality(target_summary), target_split(target_summary))
    if target_summary["n_reached"].sum() == 0:
        raise Skipped(f"no run reached {reached}")
    table = analysis.fastest_along(target_summary, analysis.BATCH_KEY, measures)
    return axis_figure(
        table,
        analysis.BATCH_KEY,
        measures,
        f"Time to {reached} against the batch size, each setting at its fastest learning rate "
        "per batch size",
    )
