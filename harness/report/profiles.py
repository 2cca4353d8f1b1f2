"""Performance profiles (Dolan & More): the share of problems on which each optimizer is
within a factor tau of the best."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import NullLocator

from harness import analysis
from harness.report.common import Skipped
from harness.style import (
    CONTEXT,
    PROFILE_LABELS,
    context_entries,
    figure_legend,
    focus_note,
    focused,
    line_style,
    new_figure,
    optimizer_color,
    optimizer_order,
    styled,
    target_text,
    wrapped_suptitle,
    zoo_colours,
)


def _profile_width(i: int, n: int) -> float:
    """Line width of the i-th of n profiles: the first drawn is the widest, so that equal
    profiles stay visible one on another."""
    return 1.5 + 1.5 * (n - 1 - i) / max(n - 1, 1)


def _profile_ticks(tau_max: float) -> list[float]:
    if tau_max <= 4:
        return [1, 1.25, 1.5, 2, 3, 4]
    if tau_max <= 16:
        return [1, 1.5, 2, 4, 8, 16]
    # powers of 2, every `stride`-th: at most 6 labels, which a panel's width holds
    top = int(np.ceil(np.log2(tau_max)))
    stride = -(-(top + 1) // 6)
    return [2.0**k for k in range(0, top + 1, stride)]


def _tau_label(tau: float) -> str:
    """Plain up to 1024; beyond, a power of 2 (1.67772e+07 would run into its neighbours)."""
    return f"{tau:g}" if tau <= 1024 else f"$2^{{{round(np.log2(tau))}}}$"


@styled
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
    fig, axes = new_figure(len(usable))
    names = optimizer_order({o for c in usable.values() for o in c.columns})
    profiles = {key: analysis.performance_profile(matrix) for key, matrix in usable.items()}
    focus = {  # a zoo's focus: each panel's best profiles
        key: focused(_by_area(profile), {n: n for n in names}, len(names))
        for key, profile in profiles.items()
    }
    shown = [n for n in names if any(n in f for f in focus.values())]
    zoo = len(shown) < len(names)
    colour = zoo_colours(shown) if zoo else {n: optimizer_color(n) for n in names}
    for ax, (key, matrix) in zip(axes[0], usable.items(), strict=True):
        profile = profiles[key]
        finite = profile.index[np.isfinite(profile.index)]
        tau_max = max(2.0, float(finite.max()) * 1.25)
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
                lw=_profile_width(shown.index(name), len(shown)),
                label=name,
                solid_capstyle="butt",
            )
        ax.set_xscale("log", base=2)
        ax.set_xlim(1, tau_max)
        ticks = [t for t in _profile_ticks(tau_max) if t <= tau_max]
        ax.set_xticks(ticks, [_tau_label(t) for t in ticks])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_ylim(-3, 103)
        label = PROFILE_LABELS.get(key, key)
        if "target" in key:
            label = label.replace("target", target_text(target, quality, split))
        ax.set_title(
            f"{label}\n({len(matrix)} problem{'s' if len(matrix) != 1 else ''})", fontsize=10
        )
        ax.set_xlabel("tau: factor of the best optimizer's cost (log scale)")
    axes[0, 0].set_ylabel("problems within tau of the best (%)")
    handles = [
        Line2D([], [], color=colour[n], lw=_profile_width(i, len(shown)))
        for i, n in enumerate(shown)
    ]
    labels = list(shown)
    for handle, label in context_entries(len(names) - len(shown)):
        handles.append(handle)
        labels.append(label)
    figure_legend(fig, handles, labels)
    wrapped_suptitle(
        fig,
        "Performance profiles: problems = net and any other key that varies, each optimizer at "
        "its best "
        "learning rate per problem\na config counts as failed when a seed diverged or missed "
        "the target"
        + _left_out_text(costs, usable, target, quality, split)
        + ("\n" + focus_note("panel by the area under its profile") if zoo else ""),
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
        PROFILE_LABELS.get(k, k).replace("target", target_text(target, quality, split))
        for k in costs
        if k not in usable
    ]
    return f"; left out, no optimizer succeeded: {', '.join(left_out)}" if left_out else ""
