"""Sensitivity to a config key: final metrics against the learning rate, the batch size, any
other numeric key the sweep varies (momentum, weight decay, table size, ...), and the effective
step lr / (1 - momentum)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import NullFormatter, NullLocator

from harness import analysis
from harness.report.common import (
    Skipped,
    fixed_text,
    focus_by_selection,
    shown_anywhere,
    study_of,
)
from harness.style import (
    CONTEXT,
    METRIC_LABELS,
    TARGET_LABELS,
    Study,
    focus_note,
    is_context,
    is_percent,
    legend_of_settings,
    line_style,
    log_label,
    log_x_lr,
    log_y,
    net_order,
    net_title,
    new_figure,
    point_style,
    scale,
    seeds_text,
    setting_order,
    setting_styles,
    styled,
    wrapped_suptitle,
)


def _mark_diverged(ax, xs, top: bool, color: str) -> None:
    """Crosses at the top (or bottom) edge of `ax` for configs with a diverged seed."""
    if not len(xs):
        return
    y = 0.96 if top else 0.04
    ax.plot(xs, [y] * len(xs), "x", color=color, ms=8, mew=2, transform=ax.get_xaxis_transform())


@styled
def lr_sensitivity_figure(
    runs: pd.DataFrame,
    batch_size: int | None = None,
    metrics: Sequence[str] | None = None,
    by: str | None = None,
    study: Study | None = None,
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
    focus = focus_by_selection(best, nets)
    study = study or study_of(runs)
    styles = setting_styles(per_lr, shown=shown_anywhere(focus), study=study)
    fig, axes = new_figure(len(nets), len(metrics), sharex="col")
    for col, net in enumerate(nets):
        panel = per_lr[per_lr["net"] == net]
        for row, metric in enumerate(metrics):
            ax = axes[row, col]
            k = scale(metric)
            for setting in setting_order(panel):
                points = panel[panel["setting"] == setting].sort_values("lr")
                ok = points[points["n_diverged"] == 0]
                mean = ok[f"{metric}_mean"] * k
                if setting not in focus[net]:  # a zoo's others: a thin grey line
                    ax.plot(ok["lr"], mean, **line_style(CONTEXT))
                    continue
                style = styles[setting]
                err = [mean - ok[f"{metric}_min"] * k, ok[f"{metric}_max"] * k - mean]
                ax.errorbar(ok["lr"], mean, yerr=err, ms=4, lw=1.4, capsize=3, **point_style(style))
                bad = points[points["n_diverged"] > 0]
                _mark_diverged(
                    ax,
                    bad["lr"],
                    top=not analysis.higher_is_better(panel, metric),
                    color=style["color"],
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
            log_x_lr(ax)
            if not is_percent(metric):
                log_y(ax)
            if row == 0:
                ax.set_title(net_title(per_lr, net))
            if row == len(metrics) - 1:
                ax.set_xlabel("learning rate (log scale)")
            if col == 0:
                label = METRIC_LABELS.get(metric, metric)
                ax.set_ylabel(label if is_percent(metric) else log_label(label))
    extra = [
        (
            Line2D([], [], ls="", marker="*", ms=12, color="white", mec="black"),
            f"best learning rate (by {METRIC_LABELS[by].split(' (')[0]})",
        ),
        (Line2D([], [], ls="", marker="x", ms=7, mew=2, color="black"), "diverged seed(s)"),
    ]
    names = {
        s: study.setting(s, o) for s, o in zip(per_lr["setting"], per_lr["optimizer"], strict=True)
    }
    legend_of_settings(fig, styles, extra, names)
    zoo = any(is_context(style) for style in styles.values())
    wrapped_suptitle(
        fig,
        f"Learning-rate sensitivity ({fixed_text(runs[runs['batch_size'] == batch_size])}): "
        f"mean over {seeds_text(per_lr['n_seeds'])}, error bars: min-max over seeds"
        + ("\n" + focus_note("net by the selection rule") if zoo else ""),
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
    elif key == analysis.MOMENTUM_KEY and min(xs) >= 0 and max(xs) < 1:
        # 1 / (1 - mu), the steps a gradient lives on, on a log axis: 0.9, 0.95 and 0.99 spread
        # out as 10, 20 and 100 steps do
        ax.set_xscale("function", functions=(_momentum_horizon, _momentum_of_horizon))
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
        ax.xaxis.set_minor_locator(NullLocator())
    elif _spans_decades(xs):
        ax.set_xscale("log")
    elif len(xs) <= 8:
        ax.set_xticks(xs, [f"{x:g}" for x in xs])


def _momentum_horizon(mu):
    return -np.log10(1 - np.clip(np.asarray(mu, dtype=float), 0.0, 1 - 1e-9))


def _momentum_of_horizon(h):
    return 1 - 10.0 ** -np.asarray(h, dtype=float)


AXIS_LABELS = {
    analysis.BATCH_KEY: "batch size (examples per step, log scale)",
    analysis.MOMENTUM_KEY: "momentum μ (axis: log of 1 / (1 − μ))",
}


@styled
def axis_figure(
    table: pd.DataFrame, key: str, metrics: Sequence[str], title: str, study: Study | None = None
) -> Figure:
    """`metrics` against the config key `key`: one panel per net and metric, one line per
    setting (table from analysis.along: columns x, line, <metric>_mean/_min/_max); mean over
    seeds with min-max error bars; a failed point (infinite cost) is left out. `study`: each
    optimizer's colour and display name across the study's figures."""
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
    study = study or Study.of_figure(table["optimizer"].astype(str))
    styles = setting_styles(table, "line", study=study)
    fig, axes = new_figure(
        len(columns), len(metrics), sharex="col", sharey="row" if facet else False
    )
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
                ax.errorbar(
                    points["x"],
                    mean,
                    yerr=err,
                    ms=4,
                    lw=1.4,
                    capsize=3,
                    **point_style(styles[line]),
                )
            _axis_scale(ax, xs, key)
            if metric.endswith("_s") and _spans_decades(xs):
                log_y(ax)  # times against sizes over decades: log-log, a slope of 1 is linear
            if row == 0:
                ax.set_title(net_title(table, net) + (f"\n{facet}={value}" if facet else ""))
            if row == len(metrics) - 1:
                ax.set_xlabel(AXIS_LABELS.get(key, key))
            if col == 0:
                label = METRIC_LABELS.get(metric, TARGET_LABELS.get(metric, metric))
                ax.set_ylabel(label)
    legend_of_settings(fig, styles, names=_names(table, "line", study))
    wrapped_suptitle(
        fig, f"{title}\nmean over {seeds_text(table['n_seeds'])}, error bars: min-max over seeds"
    )
    return fig


def _names(table: pd.DataFrame, column: str, study: Study) -> dict[str, str]:
    """Each line's label with its optimizer's display name ('SGD: batch_size=64')."""
    pairs = zip(table[column], table["optimizer"].astype(str), strict=True)
    return {line: study.setting(line, optimizer) for line, optimizer in pairs}


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
    study: Study | None = None,
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
        study,
    )


def key_figure(
    runs: pd.DataFrame,
    key: str,
    metrics: Sequence[str] | None = None,
    by: str | None = None,
    study: Study | None = None,
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
        study,
    )


@styled
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
    study = Study.of_figure(table["optimizer"].astype(str))
    styles = setting_styles(table, "curve", study=study)
    fig, axes = new_figure(len(nets))
    k = scale(metric)
    for ax, net in zip(axes[0], nets, strict=True):
        panel = table[table["net"] == net]
        for curve in setting_order(panel, "curve"):
            points = panel[(panel["curve"] == curve) & (panel["n_diverged"] == 0)]
            points = points.sort_values("effective_step")
            mean = points[f"{metric}_mean"] * k
            err = [mean - points[f"{metric}_min"] * k, points[f"{metric}_max"] * k - mean]
            ax.errorbar(
                points["effective_step"],
                mean,
                yerr=err,
                ms=4,
                lw=1.2,
                capsize=2,
                **point_style(styles[curve]),
            )
        ax.set_xscale("log")
        ax.set_title(net_title(table, net))
        ax.set_xlabel("effective step lr / (1 - μ) (log scale)")
    axes[0, 0].set_ylabel(METRIC_LABELS.get(metric, metric))
    legend_of_settings(fig, styles, names=_names(table, "curve", study))
    wrapped_suptitle(
        fig,
        f"{METRIC_LABELS.get(metric, metric).split(' (')[0].capitalize()} against the effective "
        f"step ({_length_text(runs)}); diverged configs left out\nmean over "
        f"{seeds_text(table['n_seeds'])}, error bars: min-max over seeds",
    )
    return fig
