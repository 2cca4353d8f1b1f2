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
  at 95 % and after Bonferroni's correction for the net's comparisons;
* **Schedule-Free at a constant rate against the best decayed optimizer:** the best of the
  Schedule-Free family in the constant-rate zoo (chosen on validation) against the best setting
  of the decayed study (chosen on validation), Welch's interval of the difference.

Every pick is the validation set's; the test set only reports.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
from scipy import stats

from harness import analysis, report, style
from harness.analysis.reference import BETTER, TIED, WORSE, welch_interval
from harness.errors import ConfigError, HarnessError, exit_with_error
from harness.markdown import markdown_table

ROOT = Path(__file__).resolve().parents[1]
SCHEDULE_FREE = "schedulefree"  # the family's names begin with it


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


def net_section(net: str, table: pd.DataFrame, decayed: pd.DataFrame, constant) -> list[str]:
    rows = table[table["net"] == net].sort_values("decayed", ascending=False)
    rho = stats.spearmanr(rows["constant"], rows["decayed"]).statistic
    tau = stats.kendalltau(rows["constant"], rows["decayed"]).statistic
    up = (rows["low"] > 0).sum()
    down = (rows["high"] < 0).sum()
    shown = pd.DataFrame(
        {
            "optimizer": rows["optimizer"],
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
        f"{len(rows)} optimizers in both studies. Rank correlation of the two verdicts (mean "
        f"test accuracy): Spearman {rho:.2f}, Kendall {tau:.2f}. Decayed minus constant, at "
        f"95 %: {up} better, {down} worse, {len(rows) - up - down} not told apart (or diverged).",
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
    better = strict[strict["verdict"] == BETTER]["setting"].tolist()
    return [
        f"Decayed reference (the course's best on validation): {reference['setting']} "
        f"(peak lr {reference['lr']:.3g}), {100 * reference[f'{test}_mean']:.2f} % test accuracy. "
        f"Of {m} other decayed settings, at 95 %: {counts.get(BETTER, 0)} better, "
        f"{counts.get(WORSE, 0)} worse, {counts.get(TIED, 0)} not told apart; after Bonferroni "
        f"over {m}: {len(better)} better" + (f" ({', '.join(better)})" if better else "") + ".",
        "",
    ]


def schedule_free(net: str, constant: pd.DataFrame, decayed: pd.DataFrame) -> list[str]:
    """The best Schedule-Free setting at a constant rate against the best decayed setting."""
    a, b = picked(constant), picked(decayed)
    a = a[(a["net"] == net) & a["optimizer"].str.startswith(SCHEDULE_FREE) & (a["n_diverged"] == 0)]
    b = b[(b["net"] == net) & (b["n_diverged"] == 0)]
    if a.empty or b.empty:
        return []
    sf = analysis.rank_configs(a).iloc[0]
    best = analysis.rank_configs(b).iloc[0]
    test = analysis.final_quality(decayed)
    gain, low, high = welch_interval(
        seeds_of(constant)[sf["config_id"]], seeds_of(decayed)[best["config_id"]]
    )
    verdict = "matches it" if low <= 0 <= high else ("beats it" if low > 0 else "trails it")
    return [
        f"Schedule-Free at a constant rate: {sf['optimizer']} (lr {sf['lr']:.3g}, "
        f"{100 * sf[f'{test}_mean']:.2f} %) against the best decayed setting, "
        f"{best['optimizer']} ({100 * best[f'{test}_mean']:.2f} %): "
        f"{100 * gain:+.2f} points [{100 * low:+.2f}, {100 * high:+.2f}]: it {verdict} "
        "(the interval holds zero: matches; best of each chosen on validation).",
        "",
    ]


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
    text = "\n".join(lines)
    (decayed_sweep / "reading.md").write_text(text)
    return text


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        prog="zoo_decay_reading",
        description="The zoo under a decayed rate against the constant-rate zoo: "
        "<decayed>/reading.md.",
    )
    parser.add_argument("decayed", nargs="?", type=Path, default=ROOT / "results" / "zoo_decay")
    parser.add_argument("constant", nargs="?", type=Path, default=ROOT / "results" / "zoo")
    args = parser.parse_args()
    try:
        print(main(args.decayed, args.constant))
    except (HarnessError, ValueError) as exc:  # a user's folder: one line, no traceback
        exit_with_error("zoo_decay_reading", str(exc))
