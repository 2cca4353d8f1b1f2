"""Does the zoo's verdict survive a decayed learning rate? The constant-rate zoo beside the same
protocol with the rate decayed to zero (experiment=zoo_decay_tune, zoo_decay_shortlist,
zoo_decay).

    python experiments/zoo_decay_reading.py [results/zoo_decay] [results/zoo]

Writes <decayed>/reading.md, per net:

* **constant against decayed:** each optimizer of the decayed study at its rate chosen on
  validation under each schedule, its final test accuracy (mean ± 95 % CI over seeds 1-3) and
  the difference, decayed minus constant, with Welch's interval;
* **do the verdicts agree:** Spearman's and Kendall's rank correlation between the two
  rankings (by mean test accuracy) of the optimizers both studies hold;
* **who beats the decayed reference:** the best of the course's nine under the decayed rate
  (chosen on validation) against every other decayed setting (`analysis.against_reference`),
  at 95 % and after Bonferroni's and Holm's corrections for the net's comparisons, TOST at
  ±0.2 points and the bootstrap interval of the first setting's rank (`report.significance`);
* **Schedule-Free at a constant rate against the best decayed optimizer:** the best of the
  Schedule-Free family in the constant-rate zoo (chosen on validation) against the best setting
  of the decayed study (chosen on validation), Welch's interval of the difference.

and <decayed>/constant_vs_decayed.png: per net, each optimizer's final test accuracy under
both schedules (mean and 95 % CI), the decayed reference as a dashed line.

Every pick is the validation set's; the test set only reports.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from scipy import stats

from harness import analysis, report, style
from harness.analysis.reference import (
    BETTER,
    REFERENCE,
    TIED,
    WORSE,
    welch_interval,
    with_family_verdicts,
)
from harness.errors import ConfigError, run_reading
from harness.markdown import markdown_table
from harness.report.common import optimizer_targets, study_of
from harness.report.significance import comparison_table, margin_text

ROOT = Path(__file__).resolve().parents[1]
SCHEDULE_FREE = "schedulefree"  # the family's names begin with it
FIGURE = "constant_vs_decayed.png"
# The figure's colours: the constant rate in grey, the decayed one in blue.
SCHEDULES = {"constant": ("0.45", "o"), "decayed": ("#1f77b4", "s")}
SHOWN_BELOW = 3.0  # points below a net's best mean that its panel shows; lower means at its edge
OUTLIER_IQRS = 4.0  # and no further below the panel's median mean than this many IQRs
EDGE = 0.25  # points of room left of a panel's lowest mean shown


def picked(runs: pd.DataFrame) -> pd.DataFrame:
    """Per net and optimizer: the setting chosen on validation (at the reference batch size),
    with its test accuracy over seeds."""
    return analysis.best_at_reference_batch(runs)[1]


def seeds_of(runs: pd.DataFrame) -> pd.Series:
    test = analysis.final_quality(runs)
    return runs.groupby("config_id")[test].apply(list)


def side_by_side(constant: pd.DataFrame, decayed: pd.DataFrame) -> pd.DataFrame:
    """Per net and optimizer of the decayed study (and the constant one): both picks' test
    accuracy and the difference with its interval."""
    test = analysis.final_quality(decayed)
    a, b = picked(constant), picked(decayed)
    seeds_a, seeds_b = seeds_of(constant), seeds_of(decayed)
    rows = []
    for _, d in b.iterrows():
        c = a[(a["net"] == d["net"]) & (a["optimizer"] == d["optimizer"])]
        if c.empty:
            continue
        c = c.iloc[0]
        usable = c["n_diverged"] == 0 and d["n_diverged"] == 0
        gain, low, high = (
            welch_interval(seeds_b[d["config_id"]], seeds_a[c["config_id"]])
            if usable
            else (float("nan"),) * 3
        )
        rows.append(
            {
                "net": d["net"],
                "optimizer": d["optimizer"],
                "constant": c[f"{test}_mean"],
                "constant_ci": c[f"{test}_ci"],
                "constant_lr": c["lr"],
                "decayed": d[f"{test}_mean"],
                "decayed_ci": d[f"{test}_ci"],
                "decayed_lr": d["lr"],
                "difference": gain,
                "low": low,
                "high": high,
            }
        )
    return pd.DataFrame(rows)


def _percent(mean: float, ci: float) -> str:
    return f"{100 * mean:.2f} ± {100 * ci:.2f}" if pd.notna(ci) else f"{100 * mean:.2f}"


def _percents(rows: pd.DataFrame, column: str) -> list[str]:
    return [_percent(m, c) for m, c in zip(rows[column], rows[f"{column}_ci"], strict=True)]


def _interval(row: pd.Series) -> str:
    if pd.isna(row["low"]):
        return "—"
    return f"{100 * row['difference']:+.2f} [{100 * row['low']:+.2f}, {100 * row['high']:+.2f}]"


def rank_agreement(rows: pd.DataFrame) -> str:
    """Spearman's and Kendall's rank correlation of the two verdicts, and again without the
    optimizers a diverged seed ranks last under one schedule (a divergence is not a ranking)."""

    def correlations(of: pd.DataFrame) -> str:
        rho = stats.spearmanr(of["constant"], of["decayed"]).statistic
        tau = stats.kendalltau(of["constant"], of["decayed"]).statistic
        return f"Spearman {rho:.2f}, Kendall {tau:.2f}"

    text = f"Rank correlation of the two verdicts (mean test accuracy): {correlations(rows)}"
    trained = rows[rows["low"].notna()]  # side_by_side gives no interval where a seed diverged
    if len(trained) < len(rows):
        text += f"; over the {len(trained)} that diverged under neither: {correlations(trained)}"
    return text + "."


def net_section(net: str, table: pd.DataFrame, decayed: pd.DataFrame, constant) -> list[str]:
    rows = table[table["net"] == net].sort_values("decayed", ascending=False)
    up = (rows["low"] > 0).sum()
    down = (rows["high"] < 0).sum()
    shown = pd.DataFrame(
        {
            "optimizer": rows["optimizer"].map(display_names(decayed)),
            "constant: test (%)": _percents(rows, "constant"),
            "lr": rows["constant_lr"].map("{:.3g}".format),
            "decayed: test (%)": _percents(rows, "decayed"),
            "peak lr": rows["decayed_lr"].map("{:.3g}".format),
            "decayed − constant (points, 95 % CI)": [_interval(r) for _, r in rows.iterrows()],
        }
    )  # fmt: skip
    lines = [
        f"## {net}",
        "",
        f"{len(rows)} optimizers in both studies. {rank_agreement(rows)} Decayed minus "
        f"constant, at 95 %: {up} better, {down} worse, {len(rows) - up - down} not told apart "
        "(or diverged).",
        "",
        markdown_table(shown, index=False),
        "",
    ]
    return lines + beats_reference(net, decayed) + schedule_free(net, constant, decayed)


def beats_reference(net: str, decayed: pd.DataFrame) -> list[str]:
    """Who beats the decayed study's reference on `net`, at 95 % and after Bonferroni."""
    versus = analysis.against_reference(decayed, style.COURSE_OPTIMIZERS)
    rows = versus[versus["net"] == net]
    if rows.empty:
        return [f"No decayed reference on {net}: no course optimizer's setting completed.", ""]
    m = len(rows) - 1
    strict = analysis.against_reference(decayed, style.COURSE_OPTIMIZERS, 1 - 0.05 / max(m, 1))
    strict = strict[strict["net"] == net]
    reference = rows[rows["verdict"] == "reference"].iloc[0]
    test = analysis.final_quality(decayed)
    counts = rows["verdict"].value_counts()
    named = display_names(decayed)
    better = [named.get(o, o) for o in strict[strict["verdict"] == BETTER]["setting"]]
    holm = with_family_verdicts(decayed, rows, style.COURSE_OPTIMIZERS)["holm"]
    tested, margin = comparison_table(decayed, rows, net, study_of(decayed))
    tost = tested[next(c for c in tested if c.startswith("TOST"))].str.split().str[0]
    tost = tost.value_counts()
    ranks = tested["rank [95 % bootstrap]"]
    first = tested.loc[ranks.str.split().str[0].astype(int).idxmin()]
    return [
        "Decayed reference (the course's best on validation): "
        f"{named.get(reference['setting'], reference['setting'])} "
        f"(peak lr {reference['lr']:.3g}), {100 * reference[f'{test}_mean']:.2f} % test accuracy. "
        f"Of {m} other decayed settings, at 95 %: {counts.get(BETTER, 0)} better, "
        f"{counts.get(WORSE, 0)} worse, {counts.get(TIED, 0)} not told apart; after Bonferroni "
        f"over {m}: {len(better)} better" + (f" ({', '.join(better)})" if better else "") + "; "
        f"after Holm: {(holm == BETTER).sum()} better, {(holm == WORSE).sum()} worse. TOST at "
        f"{margin_text(test, margin)} (two one-sided Welch tests at 5 %): "
        f"{tost.get('equivalent', 0)} equivalent to the reference, {tost.get('different', 0)} "
        f"different, {tost.get('undecided', 0)} undecided. How sure is #1: {first['setting']}, "
        f"first in {first['P(#1)']} of 2000 bootstrap resamples of the seeds, its rank's 95 % "
        f"interval {first['rank [95 % bootstrap]'].split()[1]}.",
        "",
    ]


def schedule_free(net: str, constant: pd.DataFrame, decayed: pd.DataFrame) -> list[str]:
    """The best Schedule-Free setting at a constant rate against the best decayed setting."""
    a, b = picked(constant), picked(decayed)
    a = a[(a["net"] == net) & a["optimizer"].str.startswith(SCHEDULE_FREE) & (a["n_diverged"] == 0)]
    b = b[(b["net"] == net) & (b["n_diverged"] == 0)]
    if a.empty or b.empty:
        return []
    named = display_names(pd.concat([constant, decayed], ignore_index=True))
    sf = analysis.rank_configs(a).iloc[0]
    best = analysis.rank_configs(b).iloc[0]
    test = analysis.final_quality(decayed)
    gain, low, high = welch_interval(
        seeds_of(constant)[sf["config_id"]], seeds_of(decayed)[best["config_id"]]
    )
    verdict = "matches it" if low <= 0 <= high else ("beats it" if low > 0 else "trails it")
    return [
        f"Schedule-Free at a constant rate: {named.get(sf['optimizer'], sf['optimizer'])} "
        f"(lr {sf['lr']:.3g}, "
        f"{100 * sf[f'{test}_mean']:.2f} %) against the best decayed setting, "
        f"{named.get(best['optimizer'], best['optimizer'])} ({100 * best[f'{test}_mean']:.2f} %): "
        f"{100 * gain:+.2f} points [{100 * low:+.2f}, {100 * high:+.2f}]: it {verdict} "
        "(it matches where the interval holds zero; the best of each chosen on validation).",
        "",
    ]


@style.styled
def schedule_figure(
    table: pd.DataFrame, reference: dict[str, float], names: dict[str, str] | None = None
) -> Figure:
    """Per net, each optimizer's final test accuracy at a constant rate and decayed to zero
    (mean and 95 % CI over seeds, each at its rate chosen on validation), sorted by the decayed
    mean, the best at the top; `reference`: each net's decayed reference mean (a dashed line).
    A panel shows at most SHOWN_BELOW points below its best mean, and no more than OUTLIER_IQRS
    interquartile ranges below its median: a lower mean is an arrow at its left edge with its
    value written."""
    nets = sorted(table["net"].unique(), key=style.natural_key)
    rows = max((table["net"] == net).sum() for net in nets)
    fig = Figure(figsize=(4.2 * len(nets), 1.2 + 0.22 * rows), layout="constrained")
    axes = fig.subplots(1, len(nets), squeeze=False)[0]
    for ax, net in zip(axes, nets, strict=True):
        part = table[table["net"] == net].sort_values("decayed", na_position="first")
        y = np.arange(len(part))
        means = 100 * part[["constant", "decayed"]].to_numpy()
        best = np.nanmax(means)
        # the axis holds the bulk of the points: one far-off mean (FTRL decayed, 12.4 %) would
        # stretch it over 3 points where the rest lie within 1; it is drawn at the edge instead
        q25, q50, q75 = np.nanpercentile(means, [25, 50, 75])
        cutoff = max(best - SHOWN_BELOW, q50 - OUTLIER_IQRS * (q75 - q25))
        low = np.nanmin(means[means >= cutoff]) - EDGE  # hugs the lowest mean it shows
        for (column, (color, marker)), shift in zip(SCHEDULES.items(), (0.17, -0.17), strict=True):
            mean = 100 * part[column].to_numpy()
            ci = 100 * part[f"{column}_ci"].fillna(0).to_numpy()
            below = mean < low
            ax.errorbar(
                mean[~below],
                (y + shift)[~below],
                xerr=ci[~below],
                fmt=marker,
                color=color,
                markersize=4,
                elinewidth=1,
                capsize=0,
            )
            # off the axis to the left: an arrow at the edge, its value beside it
            ax.plot(np.full(below.sum(), low), (y + shift)[below], "<", color=color, ms=5)
            for row in np.flatnonzero(below):
                ax.annotate(
                    f"{mean[row]:.1f}",
                    (low, y[row] + shift),
                    xytext=(6, 0),
                    textcoords="offset points",
                    fontsize=7,
                    color=color,
                    va="center",
                )
        if net in reference:
            ax.axvline(100 * reference[net], color=SCHEDULES["decayed"][0], ls="--", lw=0.8)
        ax.set_yticks(y, [(names or {}).get(o, o) for o in part["optimizer"]], fontsize=8)
        ax.set_ylim(-0.7, len(part) - 0.3)
        ax.set_xlim(low - 0.15, best + 0.6)
        ax.set_xlabel("final test accuracy (%)")
        ax.set_title(net)
        ax.grid(axis="y", visible=False)
    handles = [
        Line2D([], [], color=color, marker=marker, ls="", label=f"{name} rate")
        for name, (color, marker) in SCHEDULES.items()
    ]
    handles.append(
        Line2D([], [], color=SCHEDULES["decayed"][0], ls="--", lw=0.8, label="decayed reference")
    )
    style.figure_legend(fig, handles, [h.get_label() for h in handles])
    style.wrapped_suptitle(
        fig,
        "Final test accuracy at a constant rate and decayed to zero, each optimizer at its rate "
        "chosen on validation (mean and 95 % CI over seeds)",
    )
    return fig


def display_names(runs: pd.DataFrame) -> dict[str, str]:
    """Each optimizer's display name ('Schedule-Free RAdam (schedulefree)'), by its class."""
    targets = optimizer_targets(runs)
    return {o: style.display_name(o, targets.get(o)) for o in runs["optimizer"].unique()}


def decayed_references(decayed: pd.DataFrame) -> dict[str, float]:
    """Per net, the decayed reference's mean test accuracy (the course's best on validation)."""
    versus = analysis.against_reference(decayed, style.COURSE_OPTIMIZERS)
    if versus.empty:
        return {}
    chosen = versus[versus["verdict"] == REFERENCE]
    return dict(zip(chosen["net"], chosen[f"{analysis.final_quality(decayed)}_mean"], strict=True))


def main(decayed_sweep: Path, constant_sweep: Path) -> str:
    """Write <decayed_sweep>/reading.md and return its text."""
    for sweep in (decayed_sweep, constant_sweep):
        if not sweep.is_dir():
            raise ConfigError(f"{sweep} is not a folder")
    decayed = report.load_sweep_runs(decayed_sweep)
    constant = report.load_sweep_runs(constant_sweep)
    for sweep, runs in ((decayed_sweep, decayed), (constant_sweep, constant)):
        if analysis.quality(runs) != "accuracy":
            raise ConfigError(
                f"the decayed zoo's reading is of classification accuracy; {sweep} reports "
                f"{analysis.quality(runs)}"
            )
    table = side_by_side(constant, decayed)
    if table.empty:
        raise ConfigError(
            f"{decayed_sweep} and {constant_sweep} hold no net and optimizer in common"
        )
    lines = [
        f"# The zoo under a decayed rate: {decayed_sweep.name} against {constant_sweep.name}",
        "",
        f"{len(decayed)} decayed runs ({decayed['optimizer'].nunique()} optimizers, seeds "
        f"{', '.join(map(str, sorted(decayed['seed'].unique())))}): each optimizer's rate chosen "
        "on validation under each schedule, the test set reports.",
        "",
    ]
    for net in sorted(table["net"].unique(), key=style.natural_key):
        lines += net_section(net, table, decayed, constant)
    names = display_names(pd.concat([decayed, constant], ignore_index=True))
    figure = schedule_figure(table, decayed_references(decayed), names)
    style.save_figure(figure, decayed_sweep / FIGURE)
    lines += [f"![Constant against decayed, per net]({FIGURE})", ""]
    text = "\n".join(lines)
    (decayed_sweep / "reading.md").write_text(text)
    return text


if __name__ == "__main__":
    run_reading(
        main,
        "The zoo under a decayed rate against the constant-rate zoo: <decayed>/reading.md.",
        {"decayed": ROOT / "results" / "zoo_decay", "constant": ROOT / "results" / "zoo"},
    )
