"""Quality against the cost of a step: what each setting reaches and what each of its steps
costs alone (an optimizer's own step differs 100x across the catalogue; a stacked run's clock
is its whole stack's, so the cost is each run's calibration alone, `step_time_alone_s`)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from harness import analysis
from harness.report.common import Skipped, focus_by_selection, study_of
from harness.style import (
    CONTEXT_COLOR,
    SPLIT_NAMES,
    Study,
    figure_legend,
    label_points,
    log_x,
    log_y,
    net_order,
    net_title,
    new_figure,
    optimizer_color,
    scale,
    setting_order,
    settled,
    styled,
    wrapped_suptitle,
)

# Settings labelled by name in a panel: all of them up to this many, else the Pareto front.
LABEL_ALL = 16
# Where a name to label is longer than this, the points are labelled by numbers, keyed in the
# legend: spelled out, a panel holds few of a batch-size study's names (up to 65 characters);
# a zoo's run to 27.
LONG_NAME = 32


# A panel's y axis ends at this many times its 75th percentile of error: one setting at 50 %
# error (or a fast one on the front at 30 %) would squeeze the front's close calls, what the
# figure is for, into its floor.
WINDOW_OVER_Q75 = 1.5


def window_top(error: np.ndarray, ci: np.ndarray) -> float:
    """The top of a panel's error axis: room for most settings and their bars; settings above
    it are drawn on the edge, pointing up."""
    top = WINDOW_OVER_Q75 * float(np.nanpercentile(error, 75))
    return min(top, 1.1 * float(np.nanmax(error + ci)))


def pareto_front(seconds: np.ndarray, error: np.ndarray) -> np.ndarray:
    """Whether each point is on the front: no other point is both faster and better."""
    order = np.lexsort((error, seconds))
    front = np.zeros(len(seconds), dtype=bool)
    best = np.inf
    for i in order:
        if error[i] < best:
            front[i], best = True, error[i]
    return front


@styled
def quality_against_step_time_figure(runs: pd.DataFrame, study: Study | None = None) -> Figure:
    """Per net: each setting at its chosen learning rate (by validation, `best_configs`), its
    final test error against the seconds of one step alone (both logarithmic, mean over seeds,
    error bars the 95 % CI of the error); named where few, else on the Pareto front. The front
    is drawn from the selection metric (validation error), like every pick: the test error it
    is plotted at only reports, so the line may step up where test and validation disagree. A
    setting with a seed that diverged or failed is a cross, never on the front: its mean counts
    what that seed recorded before it ended. A zoo's (more than LEGIBLE_SETTINGS settings)
    colours only the settings a reader looks for (`focus_by_selection`: each net's best by
    validation and the course's best), the rest grey; `study`: each optimizer's colour across
    the study's figures (default: `study_of(runs)`)."""
    quality = analysis.quality(runs)
    if quality != "accuracy":
        raise Skipped(f"drawn for accuracy, not {quality}")
    if "step_time_alone_s" not in runs or runs["step_time_alone_s"].isna().all():
        raise Skipped("no run has a step time measured alone (runs from before the calibration)")
    summary = analysis.summarize(runs, metrics=[f"final_test_{quality}", "step_time_s"])
    chooser = analysis.selection_metric(runs)  # the front's quality: validation where there is
    best = analysis.best_configs(summary)
    if best.empty:
        raise Skipped("no configuration to draw")
    split = SPLIT_NAMES[chooser.split("_")[1]]  # validation (test for runs without one)
    nets = net_order(best)
    study = study or study_of(runs)
    focus = focus_by_selection(best, nets)
    fig, axes = new_figure(len(nets))
    number = {s: str(i) for i, s in enumerate(setting_order(best), start=1)}
    labelled = []
    for ax, net in zip(axes[0], nets, strict=True):
        panel = best[best["net"] == net]
        seconds = panel["step_time_s_mean"].to_numpy(float) * 1e3
        error = (1 - panel[f"final_test_{quality}_mean"].to_numpy(float)) * scale("test_accuracy")
        ci = panel[f"final_test_{quality}_ci"].fillna(0).to_numpy(float) * scale("test_accuracy")
        colors = np.array(
            [
                (study.colour(o) or optimizer_color(o)) if s in focus[net] else CONTEXT_COLOR
                for s, o in zip(panel["setting"], panel["optimizer"], strict=True)
            ]
        )
        chosen_by = panel[f"{chooser}_mean"].to_numpy(float)
        ended = panel["n_diverged"].to_numpy() > 0
        front = pareto_front(
            seconds,
            np.where(
                ended, np.inf, -chosen_by if analysis.higher_is_better(runs, chooser) else chosen_by
            ),
        )
        top = window_top(error, ci)
        off = error > top  # drawn on the top edge, pointing up
        shown = np.minimum(error, top / 1.03)
        ax.errorbar(
            seconds[~off], error[~off], yerr=ci[~off], fmt="none", ecolor="0.6", lw=0.8, zorder=1
        )
        for where, marker, size in ((~ended & ~off, "o", 22), (ended & ~off, "x", 26)):
            ax.scatter(seconds[where], error[where], c=list(colors[where]), s=size, marker=marker)
        if off.any():
            ax.scatter(seconds[off], shown[off], c=list(colors[off]), s=26, marker="^", lw=0)
        order = np.argsort(seconds[front])
        ax.plot(seconds[front][order], shown[front][order], "k--", lw=0.8)
        log_x(ax)
        log_y(ax)
        ax.set_ylim(top=top)
        ax.set_xlabel("one optimizer step alone (ms)")
        ax.set_ylabel("final test error (%)")
        above = f"; ▲ {off.sum()} above {top:.3g} %" if off.any() else ""
        ax.set_title(net_title(best, net) + above)
        display = np.array(
            [study.setting(s, o) for s, o in zip(panel["setting"], panel["optimizer"], strict=True)]
        )
        named = np.ones(len(panel), bool) if len(panel) <= LABEL_ALL else front
        others = (seconds[~named], shown[~named])
        labelled.append((ax, seconds[named], shown[named], display[named], others))
    keyed = {name for *_, names, _ in labelled for name in names}
    numbered = max((len(str(name)) for name in keyed), default=0) > LONG_NAME
    if numbered:
        optimizer_of = dict(zip(best["setting"], best["optimizer"], strict=True))
        setting_of = {study.setting(s, o): s for s, o in optimizer_of.items()}
        labelled = [
            (ax, xs, ys, [number[setting_of[name]] for name in names], others)
            for ax, xs, ys, names, others in labelled
        ]
        shown = [s for s in setting_order(best) if study.setting(s, optimizer_of[s]) in keyed]
        handles = [
            Line2D([], [], marker="o", ls="none", ms=5, color=study.colour(optimizer_of[s]) or "k")
            for s in shown
        ]
        labels = [f"{number[s]}: {study.setting(s, optimizer_of[s])}" for s in shown]
        figure_legend(fig, handles, labels)
    # what the dashes, bars and marks mean is the caption's (report.captions)
    wrapped_suptitle(fig, f"Final test error against one step's time (rates chosen on {split})")
    renderer = settled(fig)  # the layout complete, once: labels do not move it
    for ax, xs, ys, names, others in labelled:
        label_points(ax, xs, ys, names, others=others, renderer=renderer)
    return fig
