"""Convergence: a metric against iterations, epochs or training time, one curve per setting
at its best learning rate, drawn so that where the runs end up can be read and ranked.

A row per net: the whole run on the left, its final stretch (the last quarter) zoomed on the
right, and beside it the settings numbered by the selection rule (validation quality; never by
the plotted metric, which may be the test set's). Accuracies are drawn as error (100 - accuracy,
in %) on a log axis, losses and RMSEs on a log axis: nine optimizers that all end between
97.3 % and 98.4 % accuracy end between 1.6 % and 2.7 % error, a factor apart instead of a tick
band. `course_figure` is one net's row alone: the course's slide, all optimizers on one plot.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from matplotlib.transforms import offset_copy

from harness import analysis
from harness.report.common import (
    Skipped,
    fixed_text,
    focus_by_selection,
    ranked_by_selection,
    shown_anywhere,
    study_of,
)
from harness.style import (
    BAND_ALPHA,
    CONTEXT,
    LEGEND_ROWS,
    LOSS_NAMES,
    METRIC_LABELS,
    X_LABELS,
    Study,
    context_entries,
    is_percent,
    legend_column_width,
    line_style,
    log_label,
    log_y,
    lr_text,
    net_order,
    net_title,
    setting_order,
    setting_styles,
    styled,
    wrapped_suptitle,
)

X_WORDS = {"iteration": "iterations", "epoch": "epochs", "time_s": "training time"}
FINAL_STRETCH = 0.25  # the share of the run the right-hand panels zoom into
ROW_HEIGHT, FULL_WIDTH, ZOOM_WIDTH = 2.9, 4.6, 3.2


def plotted(metric: str, values):
    """What is drawn for a metric's values: error in % (100 - accuracy) for an accuracy, the
    value itself otherwise; always on a log axis."""
    return (1.0 - values) * 100.0 if is_percent(metric) else values


def plotted_label(metric: str) -> str:
    label = METRIC_LABELS.get(metric, metric)
    if is_percent(metric):
        label = label.replace("accuracy (%)", "error (%, 100 - accuracy)")
    return log_label(label)


def _final_text(metric: str, value: float) -> str:
    return f"{value:.2f} %" if is_percent(metric) else f"{value:.3g}"


def _x_label(x: str, runs: pd.DataFrame) -> str:
    label = X_LABELS.get(x, x)
    stacked = runs["engine"].eq("stacked") if "engine" in runs else pd.Series(dtype=bool)
    if x == "time_s" and stacked.any():
        # results.load_curves gives a stacked run its own clock where it was timed alone
        timed = "step_time_alone_s" in runs and runs.loc[stacked, "step_time_alone_s"].notna().all()
        label += (
            ";\na stacked run's: its steps x its step timed alone"
            if timed
            else ";\na stacked run's is its whole stack's"
        )
    return label


@styled
def convergence_figure(
    runs: pd.DataFrame,
    curves: pd.DataFrame,
    metric: str = "train_loss",
    x: str = "iteration",
    batch_size: int | None = None,
    by: str | None = None,
    study: Study | None = None,
) -> Figure:
    """A row per net, one curve per setting (each optimizer, and any other key that varies) at
    its best learning rate (by `by`, mean over seeds): `metric` against `x` (iteration, epoch
    or time_s), the mean over seeds as a line and their min-max as a band; the final stretch
    zoomed beside it, and the settings numbered by the selection rule. A curve with a diverged
    seed ends where that seed stopped, marked with a cross. `study`: each optimizer's look and
    name across the study's figures (default: `study_of(runs)`)."""
    bands, configs = _bands(runs, curves, metric, x, batch_size, by)
    rows = [(net, metric, bands) for net in net_order(bands)]
    name = METRIC_LABELS.get(metric, metric).split(" (")[0]
    if "loss" in metric:
        name += f" ({LOSS_NAMES.get(analysis.quality(runs), 'loss')})"
    shown = " (as error, log y)" if is_percent(metric) else " (log y)"
    what = f"{name.capitalize()} against {X_WORDS.get(x, x)}{shown}"
    return _figure(
        runs, curves, configs, rows, x, what, lambda net, _: net_title(bands, net), study
    )


@styled
def course_figure(
    runs: pd.DataFrame, curves: pd.DataFrame, net: str, study: Study | None = None
) -> Figure:
    """The course's slide of one net: every optimizer on one plot, the training loss above and
    the test quality (accuracies as error) below, each setting at its best learning rate."""
    rows = []
    for metric in ("train_loss", f"test_{analysis.quality(runs)}"):
        bands, configs = _bands(runs, curves, metric, "iteration", None, None)
        if net not in set(bands["net"]):
            raise Skipped(f"no '{metric}' curves of {net}")
        rows.append((net, metric, bands))
    what = f"{net_title(rows[0][2], net)}: every optimizer against iterations (log y)"
    return _figure(runs, curves, configs, rows, "iteration", what, lambda _, m: _row_name(m), study)


def _rate_text(lr) -> str:
    """', lr 0.01' after a setting's name; nothing for an optimizer without a learning rate
    (AliG, A2Grad set their own step: 'lr none' read as a missing value)."""
    text = lr_text(lr)
    return "" if text == "none" else f", lr {text}"


def _zoom_title(start: float, end: float, ends: pd.Series, x: str) -> str:
    """The zoom's title: the last quarter where every line ends together (iterations, epochs);
    on a time axis, where lines end apart, the span it shows and how many run on past it."""
    if ends.nunique() <= 1 or x != "time_s":
        return "final stretch (last quarter)"
    later = int((ends > end * 1.001).sum())
    beyond = f"; {later} run{'s' if later > 1 else ''} on past it" if later else ""
    return f"final stretch: {start:.3g}-{end:.3g} s{beyond}"


def _row_name(metric: str) -> str:
    return plotted_label(metric).split(" (")[0]


def _bands(runs, curves, metric, x, batch_size, by) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(curve bands of the best configs, those configs) of `metric` against `x`."""
    if curves.empty or not (curves["metric"] == metric).any():
        raise Skipped(f"the sweep has no '{metric}' curves")
    batch_size, configs = analysis.best_at_reference_batch(runs, by, batch_size)
    bands = analysis.curve_bands(runs, curves, configs, metric, x)
    if bands.empty:
        raise Skipped(f"no '{metric}' curves at batch size {batch_size}")
    return bands, configs


def _figure(runs, curves, configs, rows, x, what, title, study=None) -> Figure:
    """A row per (net, metric, bands) of `rows`: the whole run, the final stretch, the legend
    numbered by the selection rule; `title(net, metric)` names a row."""
    tuning = set(curves.loc[curves["metric"] == "momentum", "config_id"])  # they set their lr
    focus = focus_by_selection(configs, [net for net, _, _ in rows])
    every = pd.concat([bands for _, _, bands in rows])
    study = study or study_of(runs)
    # one per setting, each optimizer's colour the same in every figure of the study
    styles = setting_styles(every, shown=shown_anywhere(focus), study=study)
    names = {
        s: study.setting(s, o) for s, o in zip(every["setting"], every["optimizer"], strict=True)
    }
    zoo = every["setting"].nunique() > max(len(shown) for shown in focus.values())
    entries = max(len(shown) for shown in focus.values()) + zoo  # + the grey others' entry
    columns = math.ceil(entries / LEGEND_ROWS)
    height = max(ROW_HEIGHT, 0.19 * min(entries, LEGEND_ROWS))
    longest = max(len(names[s]) for _, _, bands in rows for s in bands["setting"])
    legend = columns * legend_column_width(longest + len(", lr 0.000123: 12.34 %") + 4)
    fig = Figure(
        figsize=(FULL_WIDTH + ZOOM_WIDTH + legend, height * len(rows) + 1.0), layout="constrained"
    )
    axes = fig.subplots(len(rows), 2, squeeze=False, width_ratios=(FULL_WIDTH, ZOOM_WIDTH))
    for (full, zoom), (net, metric, bands) in zip(axes, rows, strict=True):
        panel = bands[bands["net"] == net]
        ranked = ranked_by_selection(configs, net)
        _draw_row(full, zoom, panel, styles, focus[net], ranked, tuning, metric, x, columns, names)
        full.set_title(title(net, metric), loc="left")
        full.set_ylabel(plotted_label(metric))
    axes[-1, 0].set_xlabel(_x_label(x, runs))  # the zoom shares its axis: its title says which part
    # a short title that says which metric chose the learning rates (validation) and that the
    # legend's order is that of the values it prints; how to read the rest is the caption
    chooser = analysis.selection_text(runs).removeprefix("chosen by ")
    # the keys every run of the figure shares (batch 128, 20,000 iterations), stated once here
    fixed = fixed_text(analysis.runs_of(runs, configs))
    text = (
        f"{what}{', ' if fixed else ''}{fixed}\nlearning rates chosen by {chooser}; legend: "
        "best first by the value it prints"
    )
    wrapped_suptitle(fig, text, room=3)  # the 1.0 in made above holds three lines
    return fig


def _draw_row(full, zoom, panel, styles, shown, ranked, tuning, metric, x, columns, names) -> None:
    """One net: every setting's band and mean line on both panels (the grey others of a zoo: a
    thin line alone), the zoom's limits (on the `shown` settings), and the legend beside the
    zoom: the shown settings, numbered by their place among all by the final value the legend
    prints (ties and equal values in `ranked`, the selection rule's order)."""
    # the last quarter of the typical line (lines against time end at different x: a stack's
    # runs together, a run trained alone later or sooner)
    ends = panel.groupby("setting")[x].max()
    typical = ends.median()
    start = typical - FINAL_STRETCH * (typical - panel[x].min())
    # a line that runs on far past the typical one (a run many times slower: YellowFin, SOAP)
    # leaves through the zoom's right edge instead of squeezing every other line against its
    # left one; the zoom's title gives the span it shows, so that none is taken for the end
    end = min(ends.max(), typical + 2 * (typical - start))
    entries, stretch = [], []
    # the columns drawn, as arrays per setting (a zoo's panel: 134 settings of 215 config keys)
    drawn = panel[["setting", x, "min", "max", "mean"]].sort_values(["setting", x], kind="stable")
    lines = {
        setting: {c: line[c].to_numpy() for c in (x, "min", "max", "mean")}
        for setting, line in drawn.groupby("setting", sort=False, observed=True)
    }
    about = (
        panel.drop_duplicates("setting")
        .set_index("setting")[["config_id", "lr", "n_seeds", "n_diverged"]]
        .to_dict("index")
    )
    for setting in setting_order(panel):
        line, first = lines[setting], about[setting]
        style = styles[setting] if setting in shown else CONTEXT  # another net's focus: grey
        low, high, mean = (plotted(metric, line[c]) for c in ("min", "max", "mean"))
        low, high = np.minimum(low, high), np.maximum(low, high)  # error flips min and max
        for ax in (full, zoom):
            if setting in shown:
                ax.fill_between(line[x], low, high, color=style["color"], alpha=BAND_ALPHA, lw=0)
            (handle,) = ax.plot(line[x], mean, **line_style(style, lw=1.6))
        if first["n_diverged"] and setting in shown:
            for ax in (full, zoom):
                ax.plot(line[x][-1:], mean[-1:], "x", color=style["color"], ms=8)
        final = float(mean[-1])
        tuned = first["config_id"] in tuning
        rate = ", lr tuned" if tuned else _rate_text(first["lr"])
        label = f"{names.get(setting, setting)}{rate}: "
        label += _final_text(metric, final)
        if first["n_diverged"]:
            label += f" ({first['n_diverged']}/{first['n_seeds']} diverged)"
        # the legend lists the settings by the value it prints (lower is better for every
        # plotted metric: losses, RMSE, accuracy as error), a diverged one last; a legend in
        # the selection's order printed test errors that jumped up and down the list
        key = (bool(first["n_diverged"]), final if np.isfinite(final) else np.inf)
        entries.append((key, ranked.index(setting), handle, label, setting in shown))
        if setting in shown:
            inside = (line[x] >= start) & (line[x] <= end)
            stretch += [*low[inside], *mean[inside]]
    for ax in (full, zoom):
        log_y(ax)
        ax.xaxis.set_major_locator(MaxNLocator(5))
    finite = np.array([v for v in stretch if np.isfinite(v) and v > 0])
    if end > start:  # else every line is one point (runs that diverged at once): autoscaled
        zoom.set_xlim(start, end)
    if finite.size:
        # the zoom spans the final stretch's values of the lines that go on to the end, with a
        # margin; a line far above the others leaves through the top
        low, high = finite.min(), np.quantile(finite, 0.9)
        zoom.set_ylim(low / 1.08, high * 1.15)
    zoom.set_title(_zoom_title(start, end, ends, x), loc="left", fontsize=9)
    entries.sort(key=lambda e: (e[0], e[1]))
    legend = [(h, f"{i}. {text}") for i, (_, _, h, text, on) in enumerate(entries, start=1) if on]
    legend += context_entries(len(entries) - len(legend))
    zoom.legend(
        [h for h, _ in legend],
        [text for _, text in legend],
        loc="upper left",
        # clear of the last x tick label, which reaches past the panel's right edge
        bbox_to_anchor=(1.0, 1.0),
        bbox_transform=offset_copy(zoom.transAxes, fig=zoom.figure, x=20, units="points"),
        ncols=columns,
        frameon=False,
        fontsize=8,
        handlelength=1.8,
        borderaxespad=0.0,
    )
