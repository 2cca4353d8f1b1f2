"""Performance profiles (Dolan & More): the share of problems on which each optimizer is
within a factor tau of the best."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import NullLocator

from harness import analysis
from harness.report.common import Skipped, target_name
from harness.style import (
    CONTEXT,
    PROFILE_LABELS,
    Study,
    context_entries,
    figure_legend,
    focused,
    line_style,
    new_figure,
    optimizer_color,
    optimizer_order,
    styled,
    wrapped_suptitle,
)


def _profile_width(i: int, n: int) -> float:
    """Line width of the i-th of n profiles: the first drawn is the widest, so that equal
    profiles stay visible one on another."""
    return 1.5 + 1.5 * (n - 1 - i) / max(n - 1, 1)


# The x axis ends here: a profile is flat beyond its largest finite ratio, and an optimizer
# 2^30 times slower than the best reads no differently from one that failed. AlgoPerf scores
# the profile up to a ratio of 4 (`analysis.SCORE_TAU`, a dotted line).
TAU_VIEW = 32.0
# A zoo's profiles colour each panel's PROFILE_TOP best (and the course's best): three panels'
# FOCUS_TOP made 19 coloured steps, more than a reader tells apart.
PROFILE_TOP = 4


def _profile_ticks(tau_max: float) -> list[float]:
    """Plain numbers throughout (never 64 beside 2^12)."""
    if tau_max <= 4:
        return [1, 1.25, 1.5, 2, 3, 4]
    return [t for t in (1, 2, 4, 8, 16, 32) if t <= tau_max]


def _tau_label(tau: float) -> str:
    return f"{tau:g}"


@styled
def performance_profile_figure(
    costs: dict[str, pd.DataFrame],
    target: float,
    quality: str = "accuracy",
    split: str = "test",
    study: Study | None = None,
) -> Figure:
    """Performance profiles (Dolan & More), one panel per cost: the share of problems on which
    each optimizer is within a factor tau of the best optimizer (step functions, log2 tau, up
    to TAU_VIEW; beyond, the share of problems solved at all, written at the right edge).
    `target`: fixed, or one per net; `study`: each optimizer's colour and name across the
    study's figures. The legend lists the optimizers by AlgoPerf's score (area to tau 4) of
    the first panel."""
    usable = {k: c for k, c in costs.items() if len(c) and np.isfinite(c.to_numpy()).any()}
    if not usable:
        raise Skipped("no problem was solved by any optimizer (no finite cost)")
    fig, axes = new_figure(len(usable))
    names = optimizer_order({o for c in usable.values() for o in c.columns})
    profiles = {key: analysis.performance_profile(matrix) for key, matrix in usable.items()}
    focus = {  # a zoo's focus: each panel's best profiles
        key: focused(_by_area(profile), {n: n for n in names}, len(names), PROFILE_TOP)
        for key, profile in profiles.items()
    }
    shown = [n for n in names if any(n in f for f in focus.values())]
    study = study or Study.of_figure(names)
    colour = {n: study.colour(n) or optimizer_color(n) for n in names}
    first = next(iter(usable.values()))
    score = analysis.profile_score(first)
    shown = sorted(shown, key=lambda n: -score.get(n, 0.0))  # the legend's order: by score
    for ax, (key, matrix) in zip(axes[0], usable.items(), strict=True):
        profile = profiles[key]
        finite = profile.index[np.isfinite(profile.index)]
        tau_max = min(TAU_VIEW, max(2.0, float(finite.max()) * 1.25))
        taus = np.append(profile.index.to_numpy(), tau_max)
        drawn = [n for n in names if n in profile.columns]
        for name in drawn:
            shares = np.append(profile[name].to_numpy(), profile[name].iloc[-1]) * 100
            if name not in focus[key]:  # a zoo's others: thin grey steps behind
                ax.step(taus, shares, where="post", **line_style(CONTEXT))
                continue
            # Equal profiles would hide each other: the first drawn is the widest.
            ax.step(
                taus,
                shares,
                where="post",
                color=colour[name],
                ls=study.line_style(name),
                lw=_profile_width(shown.index(name), len(shown)),
                label=name,
                solid_capstyle="butt",
            )
        ax.set_xscale("log", base=2)
        ax.set_xlim(1, tau_max)
        ticks = [t for t in _profile_ticks(tau_max) if t <= tau_max]
        ax.set_xticks(ticks, [_tau_label(t) for t in ticks])
        ax.xaxis.set_minor_locator(NullLocator())
        if tau_max > analysis.SCORE_TAU:
            ax.axvline(analysis.SCORE_TAU, color="0.5", ls=":", lw=1, zorder=0)
        ax.set_ylim(-3, 103)
        label = PROFILE_LABELS.get(key, key)
        if "target" in key:
            label = label.replace("target", target_name(target, quality, split))
        ax.set_title(
            f"{label}\n({len(matrix)} problem{'s' if len(matrix) != 1 else ''})", fontsize=9
        )
        ax.set_xlabel("tau: factor of the best optimizer's cost (log scale)")
    axes[0, 0].set_ylabel("problems within tau of the best (%)")
    handles = [
        Line2D([], [], color=colour[n], ls=study.line_style(n), lw=_profile_width(i, len(shown)))
        for i, n in enumerate(shown)
    ]
    labels = [f"{study.name(n)}: {score.get(n, 0.0):.2f}" for n in shown]
    for handle, label in context_entries(len(names) - len(shown)):
        handles.append(handle)
        labels.append(label)
    figure_legend(fig, handles, labels)
    # a short title; what a profile is, the problems and the failures go in the caption
    wrapped_suptitle(
        fig,
        "Performance profiles; legend: AlgoPerf score (area to tau 4, first panel)"
        + _left_out_text(costs, usable, target, quality, split),
    )
    return fig


def _by_area(profile: pd.DataFrame) -> list[str]:
    """The optimizers of a profile, the largest area under it (over log tau: often within a
    small factor of the best) first."""
    taus = profile.index.to_numpy()
    finite = np.isfinite(taus)
    widths = np.diff(np.log(taus[finite]), append=np.log(taus[finite].max() * 1.25))
    area = (profile[finite].mul(widths, axis=0)).sum()
    return list(area.sort_values(ascending=False, kind="stable").index)


def _left_out_text(costs: dict, usable: dict, target: float, quality: str, split: str) -> str:
    left_out = [
        PROFILE_LABELS.get(k, k).replace("target", target_name(target, quality, split))
        for k in costs
        if k not in usable
    ]
    return f"; left out, no optimizer succeeded: {', '.join(left_out)}" if left_out else ""
