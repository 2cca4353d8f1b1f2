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
        ax.errorbar(seconds, error, yerr=ci, fmt="none", ecolor="0.6", lw=0.8, zorder=1)
        ax.scatter(seconds[~ended], error[~ended], c=list(colors[~ended]), s=22, zorder=2, lw=0)
        ax.scatter(seconds[ended], error[ended], c=list(colors[ended]), s=26, zorder=2, marker="x")
        ax.plot(np.sort(seconds[front]), error[front][np.argsort(seconds[front])], "k--", lw=0.8)
        log_x(ax)
        log_y(ax)
        ax.set_xlabel("one optimizer step alone (ms)")
        ax.set_ylabel("final test error (%)")
        ax.set_title(net_title(best, net))
        display = np.array(
            [study.setting(s, o) for s, o in zip(panel["setting"], panel["optimizer"], strict=True)]
        )
        named = np.ones(len(panel), bool) if len(panel) <= LABEL_ALL else front
        others = (seconds[~named], error[~named])
        labelled.append((ax, seconds[named], error[named], display[named], others))
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
    wrapped_suptitle(
        fig,
        "Final test error against the cost of one step, each setting at its learning rate "
        f"chosen on {split}\n(dashed: settings no other beats in both step time and {split} "
        "error; bars: 95 % CI over seeds; step times measured alone, on this machine"
        + ("; ×: a seed diverged or failed" if (best["n_diverged"] > 0).any() else "")
        + ")",
    )
    renderer = settled(fig)  # the layout complete, once: labels do not move it
    for ax, xs, ys, names, others in labelled:
        label_points(ax, xs, ys, names, others=others, renderer=renderer)
    return fig
