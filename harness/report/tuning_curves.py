"""Tuning curves: the expected quality of the trial picked among k trials of a tuning study
(the table of harness.tuning.tuning_curves), against k; and what tuning gains, one row per setting,
for a study of more settings than curves can tell apart (an optimizer zoo)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from harness.report.common import Skipped, shown_anywhere
from harness.style import (
    CONTEXT,
    PANEL_HEIGHT,
    PANEL_WIDTH,
    SPLIT_NAMES,
    context_entries,
    figure_legend,
    focus_note,
    focused,
    glyph,
    is_context,
    is_percent,
    line_style,
    log_label,
    log_x,
    log_y,
    net_order,
    net_title,
    new_figure,
    setting_order,
    setting_styles,
    styled,
    text_width,
    wrapped_suptitle,
)
from harness.tuning.tuning_curves import budget_ends


@styled
def tuning_curve_figure(curves: pd.DataFrame, trials: str | None = None) -> Figure:
    """Tuning curves (harness.tuning.tuning_curves): per net, the expected final validation quality
    of the trial picked among k random trials of each setting's tuning study (solid), and the
    expected test quality of that same pick (dashed), against k. Accuracies as error rates
    (100 - accuracy, %) on a log axis, so that the last tenths of a per cent stay apart.
    `trials`: what the trials are, for the title (`TuningStudy.trials_text`)."""
    if curves.empty or curves["n_trials"].max() < 2:
        raise Skipped("no setting has two trials or more: there is no tuning curve to draw")
    val_metric = curves["val_metric"].iloc[0]
    chooser = SPLIT_NAMES[val_metric.split("_")[1]]  # validation (test for runs without one)
    percent = is_percent(val_metric.removeprefix("final_"))
    nets = net_order(curves)
    after_all = budget_ends(curves)[1]["expected_val"]
    error = (1 - after_all) * 100 if percent else after_all  # lower is better either way
    optimizer_of = dict(zip(curves["setting"], curves["optimizer"], strict=False))
    focus = {  # a zoo's focus: the best after the whole budget, on validation data
        net: focused(
            error.loc[net].sort_values(kind="stable").index, optimizer_of, len(optimizer_of)
        )
        for net in nets
    }
    styles = setting_styles(curves, shown=shown_anywhere(focus))
    n = int(curves["n_trials"].max())
    fig, axes = new_figure(len(nets), sharey=True)
    for ax, net in zip(axes[0], nets, strict=True):
        panel = curves[curves["net"] == net]
        for setting in setting_order(panel):
            line = panel[panel["setting"] == setting].sort_values("k")
            untuned = len(line) == 1  # nothing to tune (YellowFin): its one trial at any k
            ks = [1, n] if untuned else line["k"]
            for column, ls in (("expected_val", "-"), ("expected_test", "--")):
                values = line[column].to_numpy()
                y = (1 - values) * 100 if percent else values
                y = np.repeat(y, 2) if untuned else y
                if setting not in focus[net]:  # a zoo's others: their validation line, grey
                    if column == "expected_val":
                        ax.plot(ks, y, **line_style(CONTEXT))
                    continue
                style = styles[setting]
                marker = None if untuned else glyph(style)
                ax.plot(ks, y, color=style["color"], ls=ls, marker=marker, ms=3.5, lw=1.4)
        ax.set_title(net_title(curves, net))
        ax.set_xlabel("trials k (of the tuning budget)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        log_y(ax)
    what = "error (100 − accuracy, %)" if percent else val_metric.removeprefix("final_val_")
    axes[0, 0].set_ylabel(log_label(f"final {what}"))
    shown = [s for s, style in styles.items() if not is_context(style)]
    handles = [Line2D([], [], color=styles[s]["color"], marker=glyph(styles[s])) for s in shown]
    labels = list(shown)
    for handle, label in context_entries(len(styles) - len(shown), f", {chooser} only"):
        handles.append(handle)
        labels.append(label)
    handles += [Line2D([], [], color="black", ls="-"), Line2D([], [], color="black", ls="--")]
    labels += [f"{chooser} (chooses)", "test (reports)"]
    title = (
        f"Tuning curves: the trial picked among k of {n} by final {chooser} "
        f"{'accuracy' if percent else what},\nexpected over random orders of the trials; "
        f"solid: its {chooser} error, dashed: its test error\n"
        f"({f'{trials}; ' if trials else ''}a setting with one trial has nothing to tune: a flat "
        "line)"
        + ("\n" + focus_note("net after the whole budget") if len(shown) < len(styles) else "")
    )
    figure_legend(fig, handles, labels, title_lines=title.count("\n") + 1)
    wrapped_suptitle(fig, title)
    return fig


# Inches a row of the tuning-gain figure takes (7-point setting names, one above the other).
GAIN_ROW = 0.15


@styled
def tuning_gain_figure(curves: pd.DataFrame, trials: str | None = None) -> Figure:
    """What tuning gains, per net: each setting's expected validation error of the trial picked
    after one trial (hollow) and after its whole budget of N (filled), one row per setting, the
    best after N on top. A short bar is cheap to tune; readable for 100+ settings, where the
    tuning curves of all of them cross. Accuracies as error rates on a log axis. `trials`: what
    the trials are, for the title (`TuningStudy.trials_text`)."""
    if curves.empty or curves["n_trials"].max() < 2:
        raise Skipped("no setting has two trials or more: tuning gains nothing to draw")
    val_metric = curves["val_metric"].iloc[0]
    chooser = SPLIT_NAMES[val_metric.split("_")[1]]
    percent = is_percent(val_metric.removeprefix("final_"))
    nets = net_order(curves)
    first, last = budget_ends(curves)  # k = 1 and k = N
    rows = int(first.groupby(level="net").size().max())
    fig, axes = new_figure(len(nets))
    names = max(len(str(name)) for name in first.index.get_level_values("setting"))
    fig.set_size_inches(
        (PANEL_WIDTH + text_width(names, 7)) * len(nets),
        max(PANEL_HEIGHT, GAIN_ROW * rows + 1.6),
    )
    for ax, net in zip(axes[0], nets, strict=True):
        after_one, after_all = first.loc[net], last.loc[net]
        error = {
            name: (1 - t["expected_val"]) * 100 if percent else t["expected_val"]
            for name, t in (("one", after_one), ("all", after_all))
        }  # lower is better either way (an error, a loss)
        order = error["all"].sort_values(kind="stable").index
        y = np.arange(len(order))[::-1]  # the best on top
        one, best = error["one"].loc[order].to_numpy(), error["all"].loc[order].to_numpy()
        ax.hlines(y, best, one, color="0.6", lw=1.2)  # the pick of N is never worse than of 1
        ax.plot(one, y, "o", mfc="white", mec="0.3", ms=4, ls="none")
        ax.plot(best, y, "o", color="tab:blue", ms=4, ls="none")
        ax.set_yticks(y, list(order), fontsize=7)
        ax.set_ylim(-0.8, len(order) - 0.2)
        ax.set_title(net_title(curves, net))
        log_x(ax)
        what = "error (%)" if percent else val_metric.removeprefix("final_val_")  # 100 − accuracy
        ax.set_xlabel(log_label(f"expected final {chooser} {what}"))
    n = int(curves["n_trials"].max())
    handles = [
        Line2D([], [], marker="o", mfc="white", mec="0.3", ls="none"),
        Line2D([], [], marker="o", color="tab:blue", ls="none"),
    ]
    figure_legend(fig, handles, ["after one trial", f"after all N trials (N ≤ {n})"])
    wrapped_suptitle(
        fig,
        f"What tuning gains: the {chooser} error of the trial picked after one trial and after "
        f"the whole budget,\nexpected over random orders of the trials"
        f"{f' ({trials})' if trials else ''}; best on top, a short bar is cheap to tune",
    )
    return fig
