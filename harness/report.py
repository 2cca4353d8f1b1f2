"""Figures and a Markdown summary of a sweep, and the `harness-report` command.

One function draws each figure; the notebooks in notebooks/ call the same functions, so a figure
looks the same in a notebook, in `harness-report`'s PNG/SVG files and in CI artifacts. Every
figure draws a table of `harness.analysis` (the tests compare the plotted data with it).

Conventions: one fixed colour per optimizer in every figure (OPTIMIZER_COLORS), seeds shown as
a mean line with a min-max band (curves) or min-max error bars (points), log scales for losses
and learning rates, legends outside the axes.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import LogFormatter, LogLocator, MaxNLocator, NullFormatter, NullLocator
from matplotlib.transforms import offset_copy

from harness import analysis, tuning_curves
from harness.errors import HarnessError, exit_with_error
from harness.results import config_keys, load_curves, load_runs
from harness.search import PROTOCOL_FILE

PROG = "harness-report"
# The course results, committed; the default sweep of the notebooks.
REPO = Path(__file__).resolve().parent.parent
DEFAULT_SWEEP = REPO / "results" / "course"
SWEEP_ENV = "HARNESS_SWEEP"
TARGET_ENV = "HARNESS_TARGET"
DEFAULT_TARGET = 0.97

# One colour per optimizer, the same in every figure (colour-blind-safe where it matters most:
# the SGD family in blues/greys, the Adam family in reds/oranges/greens).
OPTIMIZER_COLORS = {
    "sgd": "#4d4d4d",
    "momentum": "#1f77b4",
    "nesterov": "#17becf",
    "adagrad": "#bcbd22",
    "adadelta": "#8c564b",
    "rmsprop": "#9467bd",
    "adam": "#d62728",
    "adamax": "#e377c2",
    "nadam": "#ff7f0e",
    "adamw": "#2ca02c",
    "radam": "#0b1f6b",
    "yellowfin": "#d4a017",
}
OPTIMIZER_ORDER = list(OPTIMIZER_COLORS)
# Settings of a single optimizer get these in turn (colour-blind-safe, Okabe & Ito).
SETTING_COLORS = ["#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000"]
# Optimizers not listed above get one of these, by a stable hash of their name.
EXTRA_COLORS = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d"]

STYLE = {
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "legend.fontsize": 9,
    "figure.titlesize": 12,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "svg.fonttype": "none",
}
PANEL_WIDTH, PANEL_HEIGHT = 4.2, 3.3
BAND_ALPHA = 0.18
# Points from the bottom of a panel to a legend below it: tick labels and the x label.
LEGEND_DROP_PT = 30

METRIC_LABELS = {
    "train_loss": "training loss",
    "test_loss": "test loss",
    "batch_loss": "mini-batch loss",
    "test_accuracy": "test accuracy (%)",
    "test_rmse": "test RMSE",
    "train_rmse": "training RMSE",
    "test_truth_rmse": "RMSE against the noiseless truth",
    "final_test_rmse": "final test RMSE",
    "best_test_rmse": "best test RMSE",
    "step_time_s": "time per step (s)",
    "train_accuracy": "training accuracy (%)",
    "lr": "learning rate",
    "final_train_loss": "final training loss",
    "final_test_loss": "final test loss",
    "final_test_accuracy": "final test accuracy (%)",
    "best_test_accuracy": "best test accuracy (%)",
    "val_loss": "validation loss",
    "val_accuracy": "validation accuracy (%)",
    "val_rmse": "validation RMSE",
    "final_val_loss": "final validation loss",
    "final_val_accuracy": "final validation accuracy (%)",
    "best_val_accuracy": "best validation accuracy (%)",
    "final_val_rmse": "final validation RMSE",
    "best_val_rmse": "best validation RMSE",
    "train_time_s": "training time (s, evaluations excluded)",
    "wall_time_s": "wall time per run (s)",
}
X_LABELS = {
    "iteration": "iteration (optimizer steps)",
    "epoch": "epoch (passes over the training set)",
    "time_s": "training time (s, evaluations excluded)",
}


class Skipped(Exception):
    """A figure the sweep's data does not support; the message says why."""


def optimizer_color(name: str) -> str:
    if name in OPTIMIZER_COLORS:
        return OPTIMIZER_COLORS[name]
    return EXTRA_COLORS[zlib.crc32(name.encode()) % len(EXTRA_COLORS)]


def optimizer_order(names) -> list[str]:
    names = set(names)
    return [n for n in OPTIMIZER_ORDER if n in names] + sorted(names - set(OPTIMIZER_ORDER))


def _natural_key(text: str):
    import re

    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(text))]


def net_order(frame: pd.DataFrame) -> list[str]:
    """Nets from the shallowest to the deepest, then by name."""
    layers = {
        net: 0 if hidden in ("none", "") else len(str(hidden).split("-"))
        for net, hidden in zip(frame["net"], frame["hidden"], strict=True)
    }
    return sorted(layers, key=lambda net: (layers[net], _natural_key(net)))


def net_title(frame: pd.DataFrame, net: str) -> str:
    """'net2: hidden 100': a panel's title, with the net's hidden layer widths (a net whose
    label already names its varying model keys keeps its label)."""
    if ":" in net:
        return net
    hidden = str(frame.loc[frame["net"] == net, "hidden"].iloc[0])
    layers = "no hidden layer" if hidden in ("none", "") else f"hidden {hidden}"
    return f"{net}: {layers}"


def is_percent(metric: str) -> bool:
    return "accuracy" in metric


def scale(metric: str) -> float:
    """Plotted value = table value x scale (accuracies are drawn in %)."""
    return 100.0 if is_percent(metric) else 1.0


def _lr_text(lr: float) -> str:
    return f"{lr:.3g}"


def _figure(n_cols: int, n_rows: int = 1, **kwargs) -> tuple[Figure, np.ndarray]:
    """A figure of n_rows x n_cols panels. Figures are made without pyplot (no backend, no
    global state: nothing to close); the Agg and SVG canvases draw them when saved, and a
    notebook's inline backend shows them."""
    fig = Figure(figsize=(PANEL_WIDTH * n_cols, PANEL_HEIGHT * n_rows + 0.9), layout="constrained")
    axes = fig.subplots(n_rows, n_cols, squeeze=False, **kwargs)
    return fig, axes


def _styled(function: Callable) -> Callable:
    """Run a figure function under the report's rcParams (fonts, grid, spines)."""

    def wrapper(*args, **kwargs):
        with matplotlib.rc_context(STYLE):
            return function(*args, **kwargs)

    wrapper.__name__, wrapper.__doc__ = function.__name__, function.__doc__
    wrapper.__wrapped__ = function
    return wrapper


def _seeds_text(n_seeds: Sequence[int]) -> str:
    n = sorted(set(int(k) for k in n_seeds))
    if not n:
        return "no seeds"
    if len(n) == 1:
        return f"{n[0]} seed" + ("s" if n[0] != 1 else "")
    return f"{n[0]}-{n[-1]} seeds"


class _PlainLogFormatter(LogFormatter):
    """Log-axis labels as plain numbers (0.3, 2), not 3 x 10^-1."""

    def _num_to_string(self, x, vmin, vmax):
        return f"{x:g}"


def _log_y(ax) -> None:
    """A log-scale y axis labelled with plain numbers, minor ticks labelled on short ranges."""
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(_PlainLogFormatter(labelOnlyBase=False))
    ax.yaxis.set_minor_formatter(_PlainLogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


def _log_x_lr(ax) -> None:
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10))
    ax.xaxis.set_minor_formatter(NullFormatter())


LOGIT_TICKS = [1, 2, 5, 10, 20, 50, 80, 90, 95, 98, 99, 99.5, 99.8, 99.9, 99.95, 99.98, 99.99]


def _logit(p):
    q = np.clip(np.asarray(p, dtype=float) / 100, 1e-6, 1 - 1e-6)
    return np.log(q / (1 - q))


def _expit(z):
    return 100 / (1 + np.exp(-np.asarray(z, dtype=float)))


def _logit_percent_y(ax, values: np.ndarray) -> None:
    """A logit-scale y axis for values in %, ticked at 10, 50, 90, 99, ... within their range."""
    ax.set_yscale("function", functions=(_logit, _expit))
    finite = values[np.isfinite(values)]
    low, high = (finite.min(), finite.max()) if finite.size else (10.0, 99.0)
    pad = 0.25 * (_logit(high) - _logit(low)) / 10
    ax.set_ylim(_expit(_logit(low) - pad), _expit(_logit(high) + pad))
    ticks = [t for t in LOGIT_TICKS if low * 0.9 <= t <= min(high + (100 - high) * 0.5, 99.99)]
    ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
    ax.yaxis.set_minor_locator(NullLocator())


def _log_label(label: str) -> str:
    """'loss (nats)' -> 'loss (nats; log scale)'."""
    return label[:-1] + "; log scale)" if label.endswith(")") else label + " (log scale)"


# The loss of each quality metric's problem, as titles name it.
LOSS_NAMES = {"accuracy": "cross-entropy, nats", "rmse": "mean squared error"}


def default_target(quality: str) -> float | None:
    """The target of time-to-target when none is given: 97 % for accuracy; none otherwise (a
    good RMSE depends on the data)."""
    return DEFAULT_TARGET if quality == "accuracy" else None


SPLIT_NAMES = {"val": "validation", "test": "test", "train": "training"}


def target_text(target: float, quality: str = "accuracy", split: str = "test") -> str:
    """'97 % validation accuracy', 'test rmse 0.9': a target of time to target, on the split
    it is measured on (the selection split: see analysis.time_to_target)."""
    if quality == "accuracy":
        return f"{percent(target)} {SPLIT_NAMES[split]} accuracy"
    return f"{SPLIT_NAMES[split]} {quality} {target:g}"


def _target_split(target_summary: pd.DataFrame) -> str:
    """The split a time-to-target table was measured on (its `metric`: val_accuracy, ...)."""
    if "metric" in target_summary and len(target_summary):
        return str(target_summary["metric"].iloc[0]).split("_", 1)[0]
    return "test"


def percent(fraction: float) -> str:
    """0.97 -> '97 %'."""
    return f"{fraction * 100:.4g} %"


def _legend_below(fig: Figure, handles, labels, ncols: int | None = None) -> None:
    """One legend for the whole figure, below its panels (never over data)."""
    if not handles:
        return
    ncols = ncols or min(len(handles), 6)
    fig.legend(handles, labels, loc="outside lower center", ncols=ncols, frameon=False)


# --- data shared by figures, notebooks and the Markdown summary -------------------------------


def load_sweep(sweep: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, curves) of a sweep folder; ValueError when it holds no run."""
    runs = load_runs(Path(sweep))
    if runs.empty:
        raise ValueError(
            f"no runs in {sweep} (expected runs.parquet, or run folders with run.json)"
        )
    return runs, load_curves(sweep, runs)


def sweep_from_env(study: str | None = None) -> Path:
    """The sweep folder of the notebooks: $HARNESS_SWEEP, else the committed results/<study>
    (results/course by default)."""
    default = REPO / "results" / study if study else DEFAULT_SWEEP
    return Path(os.environ.get(SWEEP_ENV) or default)


def target_from_env(quality: str = "accuracy") -> float | None:
    """The target of time-to-target: $HARNESS_TARGET, else `default_target(quality)`."""
    value = os.environ.get(TARGET_ENV)
    return float(value) if value else default_target(quality)


# --- settings: one colour per optimizer, one line style per setting of an optimizer -----------

LINE_STYLES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "D", "v", "P"]


def setting_order(frame: pd.DataFrame, column: str = "setting") -> list[str]:
    """The settings of `frame` in optimizer order, then in natural order."""
    pairs = frame[["optimizer", column]].drop_duplicates()
    rank = {o: i for i, o in enumerate(optimizer_order(pairs["optimizer"]))}
    ordered = sorted(
        zip(pairs["optimizer"], pairs[column], strict=True),
        key=lambda pair: (rank[pair[0]], _natural_key(pair[1])),
    )
    return [setting for _, setting in ordered]


def setting_styles(frame: pd.DataFrame, column: str = "setting") -> dict[str, dict]:
    """Per setting: its optimizer's colour, and a line style and marker of its own among the
    settings of that optimizer (the first gets a solid line and circles). When every setting
    has one optimizer (what differs is something else: the embedding tables' optimizer, the
    momentum), each setting gets a colour of its own."""
    optimizer_of = dict(zip(frame[column], frame["optimizer"], strict=False))
    one_optimizer = len(set(optimizer_of.values())) == 1 and len(optimizer_of) > 1
    styles: dict[str, dict] = {}
    count: dict[str, int] = {}
    for i, setting in enumerate(setting_order(frame, column)):
        optimizer = optimizer_of[setting]
        n = count.get(optimizer, 0)
        count[optimizer] = n + 1
        colour = SETTING_COLORS[i % len(SETTING_COLORS)] if one_optimizer else None
        styles[setting] = {
            "color": colour or optimizer_color(optimizer),
            "ls": LINE_STYLES[n % len(LINE_STYLES)],
            "marker": MARKERS[n % len(MARKERS)],
        }
    return styles


def fixed_text(frame: pd.DataFrame) -> str:
    """What every line of a figure shares, stated once: 'schedule constant, batch 128, ...'."""
    names = {"batch_size": "batch", "iterations": "iterations", "momentum": "momentum"}
    parts = []
    for key, value in analysis.fixed_settings(frame).items():
        if key == "iterations":
            parts.append(f"{int(value):,} iterations")
        else:
            parts.append(
                f"{names.get(key, key)} {value:g}" if key != "schedule" else f"{value} schedule"
            )
    return ", ".join(parts)


def fixed_config(runs: pd.DataFrame, groups: Sequence[str] = ("train.", "data.")) -> dict:
    """The config keys of `groups` that every run shares, with their value (from `config`)."""
    if runs.empty:
        return {}
    first = json.loads(runs["config"].iloc[0])
    varying = set(config_keys(runs))
    return {k: v for k, v in first.items() if k.startswith(tuple(groups)) and k not in varying}


# --- figures ----------------------------------------------------------------------------------


@_styled
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
    fig, axes = _figure(len(nets), sharey=False)
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
            label = f"{setting}, lr {'tuned' if tuned else _lr_text(first['lr'])}"
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
            _log_y(ax)
        elif accuracy_scale == "logit":
            _logit_percent_y(ax, panel[["min", "max"]].to_numpy() * k)
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
        ylabel = _log_label(ylabel)
    axes[0, 0].set_ylabel(ylabel)
    name = METRIC_LABELS.get(metric, metric).split(" (")[0]
    if "loss" in metric:
        name += f" ({LOSS_NAMES.get(analysis.quality(runs), 'loss')})"
    fig.suptitle(
        f"{name.capitalize()} against {x.replace('_s', '')}s: each setting at its best "
        f"learning rate, {analysis.selection_text(runs)} "
        f"({fixed_text(analysis.runs_of(runs, configs))})\n"
        f"line: mean over {_seeds_text(bands['n_seeds'])}, band: min-max over seeds"
    )
    return fig


# What a self-tuning optimizer records beside `lr` (harness.engine.logged_hyperparameters).
TUNED_METRICS = ("lr", "momentum")


@_styled
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
    fig, axes = _figure(len(nets), len(metrics), sharex="col")
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
                ax.plot(line["iteration"], line["mean"], color=style["color"], ls=style["ls"])
            if metric == "lr":
                _log_y(ax)
            if row == 0:
                ax.set_title(net_title(configs, net))
            if row == len(metrics) - 1:
                ax.set_xlabel(X_LABELS["iteration"])
            if col == 0:
                label = {"lr": "learning rate α", "momentum": "momentum μ"}.get(metric, metric)
                ax.set_ylabel(_log_label(label) if metric == "lr" else label)
    _legend_of_settings(fig, styles)
    fig.suptitle(
        "Learning rate and momentum chosen by the optimizer at each step "
        f"({fixed_text(analysis.runs_of(runs, configs))})\n"
        f"line: mean over {_seeds_text(configs['n_seeds'])}, band: min-max over seeds"
    )
    return fig


def _mark_diverged(ax, xs, top: bool, color: str) -> None:
    """Crosses at the top (or bottom) edge of `ax` for configs with a diverged seed."""
    if not len(xs):
        return
    y = 0.96 if top else 0.04
    ax.plot(xs, [y] * len(xs), "x", color=color, ms=8, mew=2, transform=ax.get_xaxis_transform())


def _legend_of_settings(fig: Figure, styles: dict[str, dict], extra=()) -> None:
    handles = [
        Line2D([], [], color=s["color"], ls=s["ls"], marker=s["marker"], ms=4, lw=1.4)
        for s in styles.values()
    ]
    labels = list(styles)
    for handle, label in extra:
        handles.append(handle)
        labels.append(label)
    _legend_below(fig, handles, labels, ncols=min(len(handles), 4 if len(handles) > 7 else 7))


@_styled
def lr_sensitivity_figure(
    runs: pd.DataFrame,
    batch_size: int | None = None,
    metrics: Sequence[str] | None = None,
    by: str | None = None,
) -> Figure:
    """Final metrics against the learning rate (log x), one panel per net and metric, one line
    per setting (each optimizer, and any other key that varies): mean over seeds with min-max
    error bars; a star marks the best learning rate (by `by`, default: the selection metric,
    final validation quality), a cross at the panel's edge a learning rate with a diverged seed.
    Default panels: final training loss, the selection metric, final test quality."""
    batch_size = batch_size or analysis.reference_batch_size(runs)
    by = by or analysis.selection_metric(runs)
    metrics = metrics or tuple(
        dict.fromkeys(("final_train_loss", by, analysis.final_quality(runs)))
    )
    per_lr, best = analysis.lr_table(runs, batch_size, by)
    lrs_per = per_lr.groupby(["net", "setting"], dropna=False)["lr"].nunique()
    if per_lr.empty or lrs_per.max() < 2:
        raise Skipped(
            f"the sweep has a single learning rate per setting and net (batch {batch_size}): "
            "there is no learning-rate axis to draw"
        )
    nets = net_order(per_lr)
    styles = setting_styles(per_lr)
    fig, axes = _figure(len(nets), len(metrics), sharex="col")
    for col, net in enumerate(nets):
        panel = per_lr[per_lr["net"] == net]
        for row, metric in enumerate(metrics):
            ax = axes[row, col]
            k = scale(metric)
            for setting in setting_order(panel):
                style = styles[setting]
                points = panel[panel["setting"] == setting].sort_values("lr")
                ok = points[points["n_diverged"] == 0]
                mean = ok[f"{metric}_mean"] * k
                err = [mean - ok[f"{metric}_min"] * k, ok[f"{metric}_max"] * k - mean]
                ax.errorbar(ok["lr"], mean, yerr=err, ms=4, lw=1.4, capsize=3, **style)
                bad = points[points["n_diverged"] > 0]
                _mark_diverged(
                    ax, bad["lr"], top=not analysis.higher_is_better(metric), color=style["color"]
                )
                chosen = best[(best["net"] == net) & (best["setting"] == setting)]
                chosen = chosen[chosen["n_diverged"] == 0]
                ax.plot(
                    chosen["lr"],
                    chosen[f"{metric}_mean"] * k,
                    "*",
                    ms=15,
                    color=style["color"],
                    mec="black",
                    mew=0.8,
                    zorder=5,
                )
            _log_x_lr(ax)
            if not is_percent(metric):
                _log_y(ax)
            if row == 0:
                ax.set_title(net_title(per_lr, net))
            if row == len(metrics) - 1:
                ax.set_xlabel("learning rate (log scale)")
            if col == 0:
                label = METRIC_LABELS.get(metric, metric)
                ax.set_ylabel(label if is_percent(metric) else _log_label(label))
    extra = [
        (
            Line2D([], [], ls="", marker="*", ms=12, color="white", mec="black"),
            f"best learning rate (by {METRIC_LABELS[by].split(' (')[0]})",
        ),
        (Line2D([], [], ls="", marker="x", ms=7, mew=2, color="black"), "diverged seed(s)"),
    ]
    _legend_of_settings(fig, styles, extra)
    fig.suptitle(
        f"Learning-rate sensitivity ({fixed_text(runs[runs['batch_size'] == batch_size])}): "
        f"mean over {_seeds_text(per_lr['n_seeds'])}, error bars: min-max over seeds"
    )
    return fig


def _spans_decades(xs: Sequence[float]) -> bool:
    return min(xs) > 0 and max(xs) >= 100 * min(xs)


def _axis_scale(ax, xs: Sequence[float], key: str) -> None:
    """Batch sizes on a log2 axis ticked at the sizes run; keys whose values span decades (table
    sizes) on a log10 axis; other keys linear, ticked at their values when there are few."""
    if key == analysis.BATCH_KEY:
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(int(x)) for x in xs])
        ax.xaxis.set_minor_formatter(NullFormatter())
    elif _spans_decades(xs):
        ax.set_xscale("log")
    elif len(xs) <= 8:
        ax.set_xticks(xs, [f"{x:g}" for x in xs])


AXIS_LABELS = {
    analysis.BATCH_KEY: "batch size (examples per step, log scale)",
    analysis.MOMENTUM_KEY: "momentum μ",
}


@_styled
def axis_figure(table: pd.DataFrame, key: str, metrics: Sequence[str], title: str) -> Figure:
    """`metrics` against the config key `key`: one panel per net and metric, one line per
    setting (table from analysis.along: columns x, line, <metric>_mean/_min/_max); mean over
    seeds with min-max error bars; a failed point (infinite cost) is left out."""
    xs = sorted(table["x"].dropna().unique())
    if len(xs) < 2:
        raise Skipped(f"the sweep has a single value of {key}: no axis to draw")
    facet = facet_key(table, key)
    if facet:  # one column of panels per value of the facet; lines no longer name it
        table = table.assign(line=analysis.setting_labels(table, (analysis.LR_KEY, key, facet)))
    # Nets run at a single value of the key have no line to draw.
    nets = [n for n in net_order(table) if table.loc[table["net"] == n, "x"].nunique() > 1]
    columns = [
        (net, value)
        for net in nets
        for value in (sorted(table[facet].astype(str).unique()) if facet else [None])
    ]
    styles = setting_styles(table, "line")
    fig, axes = _figure(len(columns), len(metrics), sharex="col", sharey="row" if facet else False)
    for col, (net, value) in enumerate(columns):
        panel = table[table["net"] == net]
        if facet:
            panel = panel[panel[facet].astype(str) == value]
        for row, metric in enumerate(metrics):
            ax = axes[row, col]
            k = scale(metric)
            for line in setting_order(panel, "line"):
                points = panel[panel["line"] == line].sort_values("x")
                points = points[np.isfinite(points[f"{metric}_mean"].astype(float))]
                mean = points[f"{metric}_mean"] * k
                err = [mean - points[f"{metric}_min"] * k, points[f"{metric}_max"] * k - mean]
                ax.errorbar(points["x"], mean, yerr=err, ms=4, lw=1.4, capsize=3, **styles[line])
            _axis_scale(ax, xs, key)
            if metric.endswith("_s") and _spans_decades(xs):
                _log_y(ax)  # times against sizes over decades: log-log, a slope of 1 is linear
            if row == 0:
                ax.set_title(net_title(table, net) + (f"\n{facet}={value}" if facet else ""))
            if row == len(metrics) - 1:
                ax.set_xlabel(AXIS_LABELS.get(key, key))
            if col == 0:
                label = METRIC_LABELS.get(metric, TARGET_LABELS.get(metric, metric))
                ax.set_ylabel(label)
    _legend_of_settings(fig, styles)
    fig.suptitle(
        f"{title}\nmean over {_seeds_text(table['n_seeds'])}, error bars: min-max over seeds"
    )
    return fig


MAX_LINES = 6  # more lines than this in one panel: split the panels by a setting key


def facet_key(table: pd.DataFrame, key: str) -> str | None:
    """The setting key that splits a figure along `key` into columns of panels when its lines
    would crowd one panel: the non-numeric one with the fewest values (the budget of the
    batch-size study); None when the lines fit."""
    if table["line"].nunique() <= MAX_LINES:
        return None
    keys = analysis.label_keys(table, without=(analysis.LR_KEY, key, *analysis.NET_KEYS))
    named = [k for k in keys if not analysis.is_numeric_key(table, k)]
    return min(named, key=lambda k: table[k].astype(str).nunique(), default=None)


def _length_text(runs: pd.DataFrame) -> str:
    iterations = sorted(runs["iterations"].unique())
    return f"{iterations[0]:,} iterations" if len(iterations) == 1 else "iterations vary"


def batch_size_figure(
    runs: pd.DataFrame,
    metrics: Sequence[str] | None = None,
    by: str | None = None,
) -> Figure:
    """Final test accuracy and training time against the batch size (log2 x), one panel per net
    and metric, one line per setting (each optimizer, and any other key that varies: the
    budget, the learning-rate scaling rule, ...) at its best learning rate for each batch size;
    mean over seeds with min-max error bars."""
    sizes = sorted(runs["batch_size"].unique())
    if len(sizes) < 2:
        raise Skipped(f"the sweep has a single batch size ({sizes[0]}): no batch-size axis")
    return axis_figure(
        analysis.batch_size_table(runs, by),
        analysis.BATCH_KEY,
        metrics or (analysis.final_quality(runs), "train_time_s"),
        f"Batch size: each setting at its best learning rate per batch size ({_length_text(runs)})",
    )


def key_figure(
    runs: pd.DataFrame,
    key: str,
    metrics: Sequence[str] | None = None,
    by: str | None = None,
) -> Figure:
    """Final and best test quality and the time per step against any numeric config key the
    sweep varies (momentum, weight decay, table size, ...), each setting at its best learning
    rate for each value."""
    final, _, best, *_ = analysis.summary_metrics(runs)
    return axis_figure(
        analysis.axis_table(runs, key, by),
        key,
        metrics or (final, best, "step_time_s"),
        f"{AXIS_LABELS.get(key, key).split(' (')[0]}: each setting at its best learning rate "
        f"per value ({_length_text(runs)})",
    )


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
    reached = target_text(target, analysis.quality(target_summary), _target_split(target_summary))
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


@_styled
def effective_step_figure(runs: pd.DataFrame, metric: str | None = None) -> Figure:
    """Momentum and learning rate together: `metric` against the effective step lr / (1 - μ)
    (log x), one panel per net, one line per setting and momentum (every learning rate, mean
    over seeds with min-max error bars). Lines that fall on one curve say that only the
    effective step matters."""
    metric = metric or analysis.final_quality(runs)
    table = analysis.effective_steps(runs)
    per_line = table.groupby(["net", "line"])["momentum"].nunique()
    if table.empty or per_line.max() < 2 or table["lr"].nunique() < 2:
        raise Skipped("the sweep does not vary both the momentum and the learning rate")
    nets = net_order(table)
    table = table.assign(curve=table["line"] + ", μ=" + table["momentum"].map("{:g}".format))
    styles = setting_styles(table, "curve")
    fig, axes = _figure(len(nets))
    k = scale(metric)
    for ax, net in zip(axes[0], nets, strict=True):
        panel = table[table["net"] == net]
        for curve in setting_order(panel, "curve"):
            points = panel[(panel["curve"] == curve) & (panel["n_diverged"] == 0)]
            points = points.sort_values("effective_step")
            mean = points[f"{metric}_mean"] * k
            err = [mean - points[f"{metric}_min"] * k, points[f"{metric}_max"] * k - mean]
            ax.errorbar(
                points["effective_step"], mean, yerr=err, ms=4, lw=1.2, capsize=2, **styles[curve]
            )
        ax.set_xscale("log")
        ax.set_title(net_title(table, net))
        ax.set_xlabel("effective step lr / (1 - μ) (log scale)")
    axes[0, 0].set_ylabel(METRIC_LABELS.get(metric, metric))
    _legend_of_settings(fig, styles)
    fig.suptitle(
        f"{METRIC_LABELS.get(metric, metric).split(' (')[0].capitalize()} against the effective "
        f"step ({_length_text(runs)}); diverged configs left out\nmean over "
        f"{_seeds_text(table['n_seeds'])}, error bars: min-max over seeds"
    )
    return fig


TARGET_LABELS = {
    "iterations_to_target": "iterations to target",
    "epochs_to_target": "epochs to target",
    "seconds_to_target": "training seconds to target",
}


@_styled
def time_to_target_figure(
    target_summary: pd.DataFrame,
    target: float,
    measures: Sequence[str] = ("iterations_to_target", "seconds_to_target"),
) -> Figure:
    """Horizontal bars: per net (panel column) and setting, the iterations and training
    seconds until the quality (on the split `target_summary` was measured on: validation when
    the runs have it) first reaches `target` at the fastest learning rate (mean over seeds,
    min-max error bars); 'not reached' where no learning rate got there with every seed."""
    quality, split = analysis.quality(target_summary), _target_split(target_summary)
    if target_summary.empty or target_summary["n_reached"].sum() == 0:
        raise Skipped(f"no run reached {target_text(target, quality, split)}")
    nets = net_order(target_summary)
    fig, axes = _figure(len(nets), len(measures))
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
                lr = _lr_text(panel.loc[name, "lr"])
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
        f"mean over {_seeds_text(target_summary['n_seeds'])}, error bars: min-max over seeds "
        "(resolution: the evaluation interval)"
    )
    return fig


@_styled
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
    fig, axes = _figure(len(nets), sharey=True)
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
        _log_y(ax)
    what = "error (100 − accuracy, %)" if percent else val_metric.removeprefix("final_val_")
    axes[0, 0].set_ylabel(_log_label(f"final {what}"))
    handles = [Line2D([], [], color=styles[s]["color"], marker=styles[s]["marker"]) for s in styles]
    labels = list(styles)
    handles += [Line2D([], [], color="black", ls="-"), Line2D([], [], color="black", ls="--")]
    labels += [f"{chooser} (chooses)", "test (reports)"]
    fig.legend(handles, labels, loc="outside right center", frameon=False, fontsize=8.5)
    fig.suptitle(
        f"Tuning curves: the trial picked among k of {n} by final {chooser} "
        f"{'accuracy' if percent else what},\nexpected over random orders of the trials; "
        f"solid: its {chooser} error, dashed: its test error\n"
        "(a setting with one trial has nothing to tune: a flat line)"
    )
    return fig


PROFILE_LABELS = {
    "iterations_to_target": "iterations to target",
    "seconds_to_target": "training seconds to target",
    "final_train_loss": "final training loss",
}


def _profile_width(i: int, n: int) -> float:
    """Line width of the i-th of n profiles: the first drawn is the widest, so that equal
    profiles stay visible one on another."""
    return 1.5 + 1.5 * (n - 1 - i) / max(n - 1, 1)


def _profile_ticks(tau_max: float) -> list[float]:
    if tau_max <= 4:
        return [1, 1.25, 1.5, 2, 3, 4]
    if tau_max <= 16:
        return [1, 1.5, 2, 4, 8, 16]
    return [2.0**k for k in range(int(np.ceil(np.log2(tau_max))) + 1)]


@_styled
def performance_profile_figure(
    costs: dict[str, pd.DataFrame],
    target: float,
    quality: str = "accuracy",
    split: str = "test",
) -> Figure:
    """Performance profiles (Dolan & More), one panel per cost: the share of problems on which
    each optimizer is within a factor tau of the best optimizer (step functions, log2 tau)."""
    usable = {k: c for k, c in costs.items() if len(c) and np.isfinite(c.to_numpy()).any()}
    if not usable:
        raise Skipped("no problem was solved by any optimizer (no finite cost)")
    fig, axes = _figure(len(usable))
    names = optimizer_order({o for c in usable.values() for o in c.columns})
    for ax, (key, matrix) in zip(axes[0], usable.items(), strict=True):
        profile = analysis.performance_profile(matrix)
        finite = profile.index[np.isfinite(profile.index)]
        tau_max = max(2.0, float(finite.max()) * 1.25)
        taus = np.append(profile.index.to_numpy(), tau_max)
        drawn = [n for n in names if n in profile.columns]
        for name in drawn:
            shares = np.append(profile[name].to_numpy(), profile[name].iloc[-1]) * 100
            # Equal profiles would hide each other: the first drawn is the widest.
            ax.step(
                taus,
                shares,
                where="post",
                color=optimizer_color(name),
                lw=_profile_width(names.index(name), len(names)),
                label=name,
                solid_capstyle="butt",
            )
        ax.set_xscale("log", base=2)
        ax.set_xlim(1, tau_max)
        ticks = [t for t in _profile_ticks(tau_max) if t <= tau_max]
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_ylim(-3, 103)
        label = PROFILE_LABELS.get(key, key)
        if "target" in key:
            label = label.replace("target", target_text(target, quality, split))
        ax.set_title(f"{label}\n({len(matrix)} problems)", fontsize=10)
        ax.set_xlabel("tau: factor of the best optimizer's cost (log scale)")
    axes[0, 0].set_ylabel("problems within tau of the best (%)")
    handles = [
        Line2D([], [], color=optimizer_color(n), lw=_profile_width(i, len(names)))
        for i, n in enumerate(names)
    ]
    _legend_below(fig, handles, names)
    fig.suptitle(
        "Performance profiles: problems = net and any other key that varies, each optimizer at "
        "its best "
        "learning rate per problem\na config counts as failed when a seed diverged or missed "
        "the target" + _left_out_text(costs, usable, target, quality, split)
    )
    return fig


def _left_out_text(costs: dict, usable: dict, target: float, quality: str, split: str) -> str:
    left_out = [
        PROFILE_LABELS.get(k, k).replace("target", target_text(target, quality, split))
        for k in costs
        if k not in usable
    ]
    return f"; left out, no optimizer succeeded: {', '.join(left_out)}" if left_out else ""


# --- tables -----------------------------------------------------------------------------------


def _fmt(mean: float, ci: float, k: float, digits: int) -> str:
    if not np.isfinite(mean):
        return "n/a"
    text = f"{mean * k:.{digits}f}"
    if np.isfinite(ci):
        text += f" ± {ci * k:.{digits}f}"
    return text


def _metric_digits(metric: str) -> int:
    return 2 if is_percent(metric) else 4


def final_metrics_table(best: pd.DataFrame, metric: str | None = None) -> pd.DataFrame:
    """Net x setting: mean ± 95 % CI over seeds of `metric` at the best learning rate (given
    in brackets), accuracies in %; the best setting of each net in bold (Markdown **), by the
    selection metric (final validation quality): a verdict, never read off the test set."""
    metric = metric or analysis.final_quality(best)
    chooser = analysis.selection_metric(best)
    if f"{chooser}_mean" not in best:  # a table of other metrics: their validation twin
        twin = metric.replace("test_", "val_", 1)
        chooser = twin if f"{twin}_mean" in best else metric
    k, digits = scale(metric), _metric_digits(metric)
    # A numeric key the sweep varies (momentum, table size) makes rows, not columns.
    swept = [key for key in analysis.swept_keys(best) if key != analysis.BATCH_KEY]
    best = best.assign(
        row=analysis.joined_labels(best["net"], best, swept),
        setting=analysis.setting_labels(best, (analysis.LR_KEY, *swept)),
    )
    rows = {}
    ordered = sorted(
        best["row"].unique(),
        key=lambda r: (
            net_order(best).index(best.loc[best["row"] == r, "net"].iloc[0]),
            tuple(best.loc[best["row"] == r, swept].iloc[0]) if swept else (),
        ),
    )
    for net in ordered:
        panel = best[best["row"] == net].set_index("setting")
        ok = panel[panel["n_diverged"] == 0][f"{chooser}_mean"]
        winner = (
            (ok.idxmax() if analysis.higher_is_better(chooser) else ok.idxmin())
            if len(ok)
            else None
        )
        row = {}
        for setting in setting_order(best[best["row"] == net]):
            r = panel.loc[setting]
            value = _fmt(r[f"{metric}_mean"], r[f"{metric}_ci"], k, digits)
            text = f"{value} (lr {_lr_text(r['lr'])})"
            if r["n_diverged"]:
                text += f", {r['n_diverged']}/{r['n_seeds']} diverged"
            row[setting] = f"**{text}**" if setting == winner else text
        rows[net] = row
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "net"
    return table[setting_order(best)].fillna("")


def configs_table(summary: pd.DataFrame, best: pd.DataFrame) -> pd.DataFrame:
    """Every config: mean ± 95 % CI over seeds of the summary metrics; ★ marks the best
    learning rate of each net and setting (the configs of `best`)."""
    chosen = set(best["config_id"])
    rows = []
    for _, r in summary.iterrows():
        row = {
            "": "★" if r["config_id"] in chosen else "",
            "net": r["net"],
            "setting": r["setting"],
            "lr": _lr_text(r["lr"]),
            "batch": int(r["batch_size"]),
            "seeds": int(r["n_seeds"]),
            "diverged": int(r["n_diverged"]),
        }
        for metric in analysis.summary_metrics(summary):
            label = METRIC_LABELS[metric]
            row[label] = _fmt(
                r[f"{metric}_mean"], r[f"{metric}_ci"], scale(metric), _metric_digits(metric)
            )
        rows.append(row)
    return pd.DataFrame(rows)


def time_to_target_table(target_summary: pd.DataFrame) -> pd.DataFrame:
    """Net x setting: iterations and training seconds to the target at the fastest learning
    rate (mean over seeds), or 'not reached'."""
    by_iter = analysis.fastest_configs(target_summary, "iterations_to_target")
    by_time = analysis.fastest_configs(target_summary, "seconds_to_target")
    by_time = by_time.set_index(["net", "setting"])
    rows = {}
    for net in net_order(by_iter):
        rows[net] = {}
        panel = by_iter[by_iter["net"] == net].set_index("setting")
        for setting in setting_order(by_iter[by_iter["net"] == net]):
            r, t = panel.loc[setting], by_time.loc[(net, setting)]
            if not np.isfinite(r["iterations_to_target_cost"]):
                text = f"not reached ({r['n_reached']}/{r['n_seeds']} seeds at best)"
            else:
                text = (
                    f"{r['iterations_to_target_mean']:,.0f} it (lr {_lr_text(r['lr'])}), "
                    f"{t['seconds_to_target_mean']:.2f} s (lr {_lr_text(t['lr'])})"
                )
            rows[net][setting] = text
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "net"
    return table[setting_order(by_iter)].fillna("") if len(table) else table


def profile_summary_table(matrix: pd.DataFrame, taus=(1.0, 1.25, 1.5, 2.0, 4.0)) -> pd.DataFrame:
    """Optimizer x tau: the share of problems (in %) on which the optimizer is within a factor
    tau of the best, for one cost matrix (see profile_tables)."""
    profile = analysis.performance_profile(matrix, taus)
    table = (profile.T * 100).round(0).astype(int).astype(str) + " %"
    table = table.loc[optimizer_order(table.index)]
    table.columns = [f"tau {tau:g}" for tau in taus]
    table.index.name = "optimizer"
    return table


def markdown_table(frame: pd.DataFrame, index: bool = True) -> str:
    """A GitHub-flavoured Markdown table (no tabulate dependency)."""
    if index:
        frame = frame.reset_index()
    header = [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row in frame.itertuples(index=False):
        cells = [str(v).replace("|", "\\|") for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --- the report -------------------------------------------------------------------------------


@dataclass
class Report:
    out_dir: Path
    written: list[Path] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # figure name -> why


FIGURES = {
    "convergence_train_loss": "training loss against iterations",
    "convergence_test_accuracy": "test accuracy against iterations",
    "convergence_test_rmse": "test RMSE against iterations",
    "convergence_time": "test quality against training time",
    "lr_sensitivity": "final metrics against the learning rate",
    "batch_size": "test accuracy and training time against the batch size",
    "time_to_target_by_batch": "iterations and seconds to the target against the batch size",
    "effective_step": "test accuracy against the effective step lr / (1 - momentum)",
    "time_to_target": "iterations and seconds to the target accuracy",
    "performance_profile": "performance profiles",
    "tuned_hyperparameters": "learning rate and momentum chosen by self-tuning optimizers",
    "tuning_curves": "tuning curves: expected quality after k trials of tuning",
}


def figure_title(name: str) -> str:
    """What a figure of the report shows (a config key's figure is named by the key)."""
    return FIGURES.get(name, f"final and best test accuracy against {name}")


def _target_summary(curves: pd.DataFrame, target: float | None, quality: str) -> pd.DataFrame:
    """Time to target per config; Skipped when there is no target."""
    if target is None:
        raise Skipped(f"no target for {quality} (give one with --target)")
    return analysis.summarize_time_to_target(analysis.time_to_target(curves, target))


def make_figures(
    runs: pd.DataFrame,
    curves: pd.DataFrame,
    target: float | None,
    tuned: Sequence[str] | None = None,
) -> dict[str, Figure | Skipped]:
    """Every figure of the report by name, or the Skipped exception that says why not.
    Figures of time to target need a `target` (for accuracy, `default_target` gives one); the
    tuning curves need the keys a tuning study tuned (`tuned`, from its tuning.json)."""
    q, split = analysis.quality(runs), analysis.selection_split(curves)
    try:
        ttt: pd.DataFrame | Skipped = _target_summary(curves, target, q)
    except Skipped as exc:
        ttt = exc

    def with_target(draw: Callable[[pd.DataFrame, float], Figure]) -> Callable[[], Figure]:
        def make() -> Figure:
            if isinstance(ttt, Skipped):
                raise ttt
            return draw(ttt, target)

        return make

    makers = {
        "convergence_train_loss": lambda: convergence_figure(runs, curves, "train_loss"),
        f"convergence_test_{q}": lambda: convergence_figure(runs, curves, f"test_{q}"),
        "convergence_time": lambda: convergence_figure(runs, curves, f"test_{q}", x="time_s"),
        "lr_sensitivity": lambda: lr_sensitivity_figure(runs),
        "batch_size": lambda: batch_size_figure(runs),
        "time_to_target_by_batch": with_target(time_to_target_by_batch_figure),
        "effective_step": lambda: effective_step_figure(runs),
        "time_to_target": with_target(time_to_target_figure),
        "performance_profile": lambda: performance_profile_figure(
            analysis.profile_tables(runs, curves, target), target, q, split
        ),
        "tuned_hyperparameters": lambda: tuned_hyperparameters_figure(runs, curves),
        "tuning_curves": lambda: tuning_curve_figure(_tuning_curves(runs, tuned)),
    }
    # Any other numeric key the sweep varies (momentum, weight decay, ...) gets a figure too.
    for key in analysis.swept_keys(runs):
        if key != analysis.BATCH_KEY:
            makers[key] = functools.partial(key_figure, runs, key)
    figures = {}
    for name, make in makers.items():
        try:
            figures[name] = make()
        except Skipped as exc:
            figures[name] = exc
    return figures


def _tuning_curves(runs: pd.DataFrame, tuned: Sequence[str] | None) -> pd.DataFrame:
    if not tuned:
        raise Skipped("not a tuning study (no tuning.json in the sweep folder)")
    return tuning_curves.tuning_curves(runs, tune=tuned)


def tuned_keys_of(sweep: Path) -> list[str] | None:
    """The keys a tuning study tuned (its tuning.json: hydra/sweeper=tune), or None."""
    protocol = sweep / PROTOCOL_FILE
    return json.loads(protocol.read_text())["tuned_keys"] if protocol.exists() else None


def tuning_markdown(runs: pd.DataFrame, tuned: Sequence[str]) -> list[str]:
    """The summary's section on tuning curves: expected quality after k trials."""
    table = tuning_curves.tuning_table(tuning_curves.tuning_curves(runs, tune=tuned))
    if table.empty:
        return []
    nets, settings = net_order(runs.assign(net=analysis.net_labels(runs))), setting_order(table)
    table = table.sort_values(
        ["net", "setting"],
        key=lambda c: c.map((nets if c.name == "net" else settings).index),
        ignore_index=True,
    ).drop(columns="optimizer")
    return [
        "",
        "## Tuning curves",
        "",
        f"Expected final quality of the trial picked among k random trials of each setting "
        f"({', '.join(tuned)} tuned; {analysis.selection_text(runs)}), over every k-subset of "
        "its trials: 'validation / test' (the test value is what a user with k trials would "
        "report; it chose nothing).",
        "",
        markdown_table(table, index=False),
    ]


def save_figure(figure: Figure, path: str | Path) -> None:
    """Save as the file's suffix says (png at 150 dpi, svg with text kept as text)."""
    with matplotlib.rc_context(STYLE):
        figure.savefig(path, dpi=150, bbox_inches="tight", pad_inches=0.05)


def show(make: Callable[..., Figure], *args, **kwargs) -> Figure | None:
    """For notebooks: the figure, or None after printing why the sweep cannot have it."""
    try:
        return make(*args, **kwargs)
    except Skipped as exc:
        print(f"Figure skipped: {exc}")
        return None


def quality_at_time_markdown(runs: pd.DataFrame, curves: pd.DataFrame) -> list[str]:
    """The section of the summary on quality after the same training time, and time per step,
    for the best configs at the reference batch size."""
    seconds, table = analysis.quality_at_time(runs, curves)
    _, best = analysis.best_at_reference_batch(runs)
    chosen = table[table["config_id"].isin(best["config_id"])]
    metric = f"test_{analysis.quality(runs)}_at_time"
    return [
        "",
        f"## Test {analysis.quality(runs)} after {seconds:.3g} s of training",
        "",
        "The same training time for every config (the shortest run's), evaluations excluded: "
        "the last evaluation within it, at each setting's best learning rate "
        f"({analysis.selection_text(runs)}); bold: the best by the same split at that time. "
        "Then the time per optimizer step (seconds; a stacked run's is its stack's).",
        "",
        markdown_table(final_metrics_table(chosen, metric)),
        "",
        markdown_table(final_metrics_table(chosen, "step_time_s")),
    ]


def summary_markdown(
    sweep: Path,
    runs: pd.DataFrame,
    curves: pd.DataFrame,
    target: float | None,
    figures: dict[str, str] | None = None,
    skipped: dict[str, str] | None = None,
    tuned: Sequence[str] | None = None,
) -> str:
    """The Markdown summary: what the sweep holds, the final-metrics tables, every config,
    time to target (with a target), performance profiles, and the figures made and skipped."""
    summary = analysis.summarize(runs)
    batch, best = analysis.best_at_reference_batch(runs)
    q, split = analysis.quality(runs), analysis.selection_split(curves)
    n_div = int((runs["status"] == "diverged").sum())
    seeds = summary["n_seeds"]

    def values(column: str) -> str:
        items = runs[column].dropna().unique()
        numeric = pd.api.types.is_numeric_dtype(runs[column])
        items = sorted(items) if numeric else sorted(items, key=_natural_key)
        return ", ".join(f"{v:g}" if numeric else str(v) for v in items)

    seeds_text = f"{seeds.min()}" if seeds.min() == seeds.max() else f"{seeds.min()}-{seeds.max()}"
    varying = [c for c in analysis.CHOICE_COLUMNS if runs[c].nunique() > 1]
    varying += analysis.label_keys(runs)
    derived = [k for k in analysis.varying_keys(runs) if k not in varying]
    fixed = fixed_config(runs)

    parts = [
        f"# Sweep report: {sweep}",
        "",
        f"{len(runs)} runs ({n_div} diverged) of {len(summary)} configs, "
        f"{seeds_text} seeds each; "
        f"{', '.join(f'{n:,}' for n in sorted(runs['iterations'].unique()))} iterations.",
        "",
        f"* nets: {', '.join(net_order(summary))}",
        f"* optimizers: {', '.join(optimizer_order(runs['optimizer']))}",
        f"* learning rates: {values('lr')}",
        f"* batch sizes: {values('batch_size')}",
        f"* schedules: {values('schedule')}",
        f"* keys that vary between configs: {', '.join(varying) or 'none'}",
        *([f"* keys set by those: {', '.join(derived)}"] if derived else []),
        f"* the same for every run: {', '.join(f'{k}={v}' for k, v in fixed.items())}",
        "",
        "Intervals are 95 % confidence intervals of the mean over seeds (Student's t); "
        f"accuracies in %, losses: {LOSS_NAMES.get(q, 'the problem loss')}.",
        "",
        f"## Final metrics at the best learning rate (batch {batch})",
        "",
        "Best learning rate per net and setting (each optimizer, and any other key that "
        f"varies): {analysis.selection_text(runs)}, mean over seeds (configs with a diverged "
        "seed last). Bold, in every table: the net's best setting by the same rule.",
    ]
    for metric in analysis.summary_metrics(runs):
        parts += [
            "",
            f"### {METRIC_LABELS[metric]}",
            "",
            markdown_table(final_metrics_table(best, metric)),
        ]
    parts += [
        "",
        "## Every configuration",
        "",
        f"★: the best learning rate of its net and setting (at batch {batch}), "
        f"{analysis.selection_text(runs)}.",
        "",
        markdown_table(configs_table(summary, best), index=False),
    ]
    if target is not None:
        target_summary = _target_summary(curves, target, q)
        parts += [
            "",
            f"## Time to {target_text(target, q, split)}",
            "",
            f"Iterations and training seconds (evaluations excluded) until {SPLIT_NAMES[split]} "
            f"{q} first reaches the target, at each setting's fastest learning rate, mean over "
            "seeds (the split that chooses the fastest rate is the one measured); a "
            "learning rate counts only when every seed reaches the target. Resolution: the "
            "evaluation interval.",
            "",
        ]
        if target_summary["n_reached"].sum() if len(target_summary) else 0:
            parts.append(markdown_table(time_to_target_table(target_summary)))
        else:
            parts.append(f"No run reached {target_text(target, q, split)}.")
    parts += quality_at_time_markdown(runs, curves)
    if tuned:
        parts += tuning_markdown(runs, tuned)
    costs = analysis.profile_tables(runs, curves, target)
    parts += [
        "",
        "## Performance profiles",
        "",
        "Share of problems (net and any other key that varies) on which an optimizer, at its "
        "best learning rate for the problem, is within a factor tau of the best optimizer "
        "(tau = 1: it is the best).",
    ]
    for key, matrix in costs.items():
        label = PROFILE_LABELS.get(key, key)
        if target is not None:
            label = label.replace("target", target_text(target, q, split))
        parts += ["", f"### {label}", ""]
        if len(matrix) and np.isfinite(matrix.to_numpy()).any():
            unsolved = int((~np.isfinite(matrix.to_numpy())).all(axis=1).sum())
            parts.append(markdown_table(profile_summary_table(matrix)))
            parts.append("")
            parts.append(
                f"{len(matrix)} problems"
                + (f", {unsolved} solved by no optimizer." if unsolved else ".")
            )
        else:
            parts.append("No optimizer solved any problem.")
    if figures is not None:
        parts += ["", "## Figures", ""]
        parts += [f"* [{figure_title(n)}]({path})" for n, path in figures.items()]
        for name, why in (skipped or {}).items():
            parts.append(f"* skipped: {figure_title(name)}: {why}")
    return "\n".join(parts) + "\n"


def write_report(
    sweep: str | Path,
    out_dir: str | Path | None = None,
    target: float | None = None,
    formats: Sequence[str] = ("png", "svg"),
) -> Report:
    """Write every figure the sweep supports (as `formats`) and summary.md into `out_dir`
    (default: <sweep>/report). `target`: of time to target (default: `default_target`)."""
    sweep = Path(sweep)
    runs, curves = load_sweep(sweep)
    target = default_target(analysis.quality(runs)) if target is None else target
    out = Path(out_dir) if out_dir is not None else sweep / "report"
    out.mkdir(parents=True, exist_ok=True)
    report = Report(out)
    figures = {}
    tuned = tuned_keys_of(sweep)
    for name, figure in make_figures(runs, curves, target, tuned).items():
        if isinstance(figure, Skipped):
            report.skipped[name] = str(figure)
            continue
        for fmt in formats:
            path = out / f"{name}.{fmt}"
            save_figure(figure, path)
            report.written.append(path)
        figures[name] = f"{name}.{formats[0]}"
    text = summary_markdown(sweep, runs, curves, target, figures, report.skipped, tuned)
    (out / "summary.md").write_text(text)
    report.written.append(out / "summary.md")
    return report


def _esgd_study(folder: Path, out: Path | None) -> bool:
    """An ESGD study's folder (harness-train experiment=esgd) is drawn by its own figures and
    tables, again from its rows; False for any other folder."""
    from harness.esgd.app import is_study, render

    if not is_study(folder):
        return False
    out = out or folder
    render(folder, out)
    print(f"{folder}: an ESGD study; tables, figures and summary.md written to {out}")
    return True


def main(argv: Sequence[str] | None = None) -> None:
    """`harness-report SWEEP_DIR [--out DIR] [--target 0.97]`."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Figures (PNG, SVG) and a Markdown summary of a sweep folder, without Jupyter.",
    )
    parser.add_argument(
        "sweep", type=Path, help="sweep folder (runs.parquet + curves.parquet, or run folders)"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="output folder (default: SWEEP/report)"
    )
    parser.add_argument(
        "--target",
        type=float,
        default=None,
        help="test quality for time-to-target: an accuracy as a fraction (default: "
        f"{DEFAULT_TARGET}), or another metric's value (an RMSE: no default)",
    )
    parser.add_argument(
        "--formats", nargs="+", default=["png", "svg"], help="figure formats (default: png svg)"
    )
    args = parser.parse_args(argv)

    if not args.sweep.exists():
        exit_with_error(PROG, f"no such folder: {args.sweep}")
    if not args.sweep.is_dir():
        exit_with_error(PROG, f"not a folder: {args.sweep}")
    if args.target is not None and not 0 < args.target <= 1:
        exit_with_error(PROG, f"--target is a fraction in (0, 1], got {args.target}")
    try:
        if _esgd_study(args.sweep, args.out):
            return
        report = write_report(args.sweep, args.out, args.target, args.formats)
    except (OSError, ValueError, HarnessError) as exc:  # unreadable tables, no runs, ...
        exit_with_error(PROG, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    for path in report.written:
        print(path)
    for name, why in report.skipped.items():
        print(f"skipped {name}: {why}")
