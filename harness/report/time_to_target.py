"""Time to a target: iterations and training seconds until the quality first reaches a
target, per setting and against the batch size."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from harness import analysis
from harness.report.common import Skipped, target_name, target_split, value_text
from harness.report.sensitivity import axis_figure
from harness.style import (
    COURSE_OPTIMIZERS,
    FOCUS_TOP,
    LEGIBLE_SETTINGS,
    PANEL_WIDTH,
    TARGET_LABELS,
    Study,
    lr_text,
    net_order,
    net_title,
    new_figure,
    optimizer_color,
    setting_order,
    styled,
    text_width,
    wrapped_suptitle,
)


@styled
def time_to_target_figure(
    target_summary: pd.DataFrame,
    target,
    measures: Sequence[str] = ("iterations_to_target", "seconds_to_target"),
    study: Study | None = None,
) -> Figure:
    """Horizontal bars: per net (panel column) and setting, the iterations and training
    seconds until the quality (on the split `target_summary` was measured on: validation when
    the runs have it) first reaches `target` at the fastest learning rate (mean over seeds,
    min-max error bars); 'not reached' where no learning rate got there with every seed. A
    zoo's panel shows its fastest settings and the course's fastest (`_bars`). `target`: one
    for every net, or one per net (`analysis.reference_targets`), named above each panel;
    `study`: each optimizer's colour and name across the study's figures."""
    quality, split = analysis.quality(target_summary), target_split(target_summary)
    if target_summary.empty or target_summary["n_reached"].sum() == 0:
        raise Skipped(f"no run reached {target_name(target, quality, split)}")
    nets = net_order(target_summary)
    settings = target_summary["setting"].nunique()
    zoo = settings > LEGIBLE_SETTINGS
    bars = {
        (measure, net): _bars(fastest[fastest["net"] == net], measure, zoo)
        for measure in measures
        for fastest in [analysis.fastest_configs(target_summary, measure)]
        for net in nets
    }
    shown = list(dict.fromkeys(o for panel, _ in bars.values() for o in panel["optimizer"]))
    study = study or Study.of_figure(target_summary["optimizer"].astype(str))
    colour = {o: study.colour(o) or optimizer_color(o) for o in shown}
    optimizer_of = dict(zip(target_summary["setting"], target_summary["optimizer"], strict=False))
    fig, axes = new_figure(len(nets), len(measures))
    # the names beside the bars: a panel's width holds ~12 characters of them (a batch-size
    # study's settings run to 65; squeezed, the constrained layout would give up)
    longest = max(
        len(study.setting(name, optimizer_of[name]))
        for panel, _ in bars.values()
        for name in panel.index
    )
    fig.set_figwidth(len(nets) * (PANEL_WIDTH + text_width(max(0, longest - 12), 9)))
    # a bar's label needs its line: panels grow with the settings they list
    rows = max(len(panel) + (len(others) > 0) for panel, others in bars.values())
    fig.set_figheight(max(fig.get_figheight(), len(measures) * (0.22 * rows + 1.0) + 0.9))
    for row, measure in enumerate(measures):
        for col, net in enumerate(nets):
            ax = axes[row, col]
            panel, others = bars[(measure, net)]
            names = list(panel.index)
            done = np.isfinite(panel[f"{measure}_cost"].to_numpy())
            mean = panel[f"{measure}_mean"].where(done, 0.0)
            lo = (mean - panel[f"{measure}_min"]).where(done, 0.0)
            hi = (panel[f"{measure}_max"] - mean).where(done, 0.0)
            ys = np.arange(len(names))
            ax.barh(
                ys,
                mean,
                xerr=[lo, hi],
                color=[colour[o] for o in panel["optimizer"]],
                capsize=3,
                height=0.65,
                error_kw={"lw": 1},
            )
            # each bar's rate past its error bar's end, where no whisker crosses it
            ends = (mean + hi).to_numpy(float)
            for y, name, ok, end in zip(ys, names, done, ends, strict=True):
                text = f"lr {lr_text(panel.loc[name, 'lr'])}" if ok else "not reached"
                ax.annotate(
                    text,
                    (end, y),
                    xytext=(3, 0),
                    textcoords="offset points",
                    va="center",
                    fontsize=8,
                )
            if len(ends) and ends.max() > 0:  # room for the longest bar's label (a fifth)
                ax.set_xlim(0, ends.max() * 1.3)
            # few, short tick labels: a panel is narrow, and seconds to target can be 0.0125
            ax.xaxis.set_major_locator(MaxNLocator(nbins=4, steps=[1, 2, 2.5, 5, 10]))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
            labels = [study.setting(n, optimizer_of[n]) for n in names]
            if len(others):  # a zoo's others: how many reached the target, in one line
                reached = int(np.isfinite(others).sum())
                labels = [*labels, f"{len(others)} others"]
                ys = np.append(ys, len(names))
                summary = f" {reached} reached it, {len(others) - reached} not"
                ax.text(0, len(names), summary, va="center", fontsize=8, color="0.35")
            ax.set_yticks(ys, labels)
            ax.set_ylim(len(labels) - 0.4, -0.6)  # the first on top
            ax.grid(axis="y", visible=False)
            ax.set_xlabel(
                TARGET_LABELS.get(measure, measure) + (" (s)" if "seconds" in measure else "")
            )
            if row == 0:
                goal = value_text(analysis.target_of(target, net), quality)
                ax.set_title(f"{net_title(target_summary, net)}\ntarget {goal}", fontsize=10)
            if not done.any():
                ax.set_xlim(0, 1)
                ax.set_xticks([])
    # a short title; what the bars are and how to read them is the caption (CAPTIONS)
    wrapped_suptitle(fig, f"Time to {target_name(target, quality, split)}")
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
    reached = target_name(target, analysis.quality(target_summary), target_split(target_summary))
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


def _bars(fastest: pd.DataFrame, measure: str, zoo: bool) -> tuple[pd.DataFrame, pd.Series]:
    """A panel's bars, fastest first (the order of the values they show; those that never
    reached the target last, in optimizer order), and for a zoo the costs of the settings left
    out: a zoo's panel shows its FOCUS_TOP fastest that reached the target and the course's
    fastest (reached or not: the reference)."""
    panel = fastest.set_index("setting").loc[setting_order(fastest)]
    cost = panel[f"{measure}_cost"].sort_values(kind="stable")
    if not zoo:
        return panel.loc[cost.index], pd.Series(dtype=float)
    course = [s for s in cost.index if panel.loc[s, "optimizer"] in COURSE_OPTIMIZERS][:1]
    names = list(dict.fromkeys([*cost[np.isfinite(cost)].index[:FOCUS_TOP], *course]))
    return panel.loc[names], cost.drop(names)
