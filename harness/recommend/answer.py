"""The answer: phase 3's runs of every contender ranked by mean final validation quality (the
choice never sees the test set), with the test quality each reaches (mean, 95 % t interval over
seeds) and its difference to the first (Welch's t interval), as `ranks.csv`, the convergence
figure and the answer's README.md."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from harness.markdown import markdown_table


def ranks(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per contender, best first: rank, optimizer, chosen lr, seeds, diverged seeds,
    val mean, test mean and its interval, test difference to the first and its interval. A
    contender with a diverged or failed seed ranks after every contender without one."""
    from scipy import stats

    quality = str(runs["quality"].iloc[0])
    higher = bool(runs["higher_is_better"].iloc[0])
    sign = 1.0 if higher else -1.0
    rows = []
    for optimizer, group in runs.groupby("optimizer", observed=True):
        ok = group[group["status"] == "completed"]
        test = ok[f"final_test_{quality}"].to_numpy(float)
        rows.append(
            {
                "optimizer": str(optimizer),
                "lr": group["lr"].iloc[0],
                "seeds": len(group),
                "diverged": int((group["status"] != "completed").sum()),
                f"val_{quality}": ok[f"final_val_{quality}"].mean(),
                f"test_{quality}": test.mean() if len(test) else math.nan,
                "test_ci": _half_width(test, stats),
                "_test": test,
            }
        )
    table = pd.DataFrame(rows)
    table["_key"] = [
        (d > 0, -sign * v if not math.isnan(v) else math.inf)
        for d, v in zip(table["diverged"], table[f"val_{quality}"], strict=True)
    ]
    table = table.sort_values(["_key", "optimizer"]).reset_index(drop=True)
    first = table["_test"].iloc[0]
    low, high = [], []
    for test in table["_test"]:
        lo, hi = _welch(test, first, stats)
        low.append(lo)
        high.append(hi)
    table["test_vs_first"] = table[f"test_{quality}"] - table[f"test_{quality}"].iloc[0]
    table["vs_first_low"], table["vs_first_high"] = low, high
    table.insert(0, "rank", range(1, len(table) + 1))
    return table.drop(columns=["_key", "_test"])


def _half_width(x: np.ndarray, stats) -> float:  # noqa: ANN001
    if len(x) < 2:
        return math.nan
    return float(stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))


def _welch(a: np.ndarray, b: np.ndarray, stats) -> tuple[float, float]:  # noqa: ANN001
    """The 95 % interval of mean(a) - mean(b), Welch's t (nan where a side has < 2 seeds)."""
    if len(a) < 2 or len(b) < 2:
        return math.nan, math.nan
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = math.sqrt(va + vb)
    diff = a.mean() - b.mean()
    if se == 0:
        return diff, diff
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = stats.t.ppf(0.975, df) * se
    return diff - half, diff + half


def convergence_png(folder: Path, runs: pd.DataFrame, table: pd.DataFrame, out: Path) -> None:
    """Test quality against iterations, one line per contender (mean of its seeds), the
    contenders in the table's order; accuracies drawn as error on a log axis."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from harness.results import load_curves

    quality = str(runs["quality"].iloc[0])
    metric = f"test_{quality}"
    curves = load_curves(folder, runs, metrics=[metric])
    mean = curves.groupby(["optimizer", "iteration"], observed=True)["value"].mean()
    fig, ax = plt.subplots(figsize=(8, 5), layout="constrained")
    cmap = plt.get_cmap("tab20")
    for i, optimizer in enumerate(table["optimizer"]):
        if optimizer not in mean.index.get_level_values(0):
            continue
        line = mean.loc[optimizer]
        y = 1 - line.to_numpy() if quality == "accuracy" else line.to_numpy()
        ax.plot(line.index, y, color=cmap(i % 20), lw=1.2, label=f"{i + 1}. {optimizer}")
    ax.set_yscale("log")
    ax.set_xlabel("iteration")
    ax.set_ylabel("test error" if quality == "accuracy" else f"test {quality}")
    ax.set_title("Each contender at its rate chosen on validation, mean of its seeds")
    ax.legend(fontsize=7, ncol=2)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def readme(
    title: str,
    command: str,
    rule: str,
    protocol: list[str],
    cost: list[str],
    table: pd.DataFrame,
    quality: str,
    seconds: list[float],
) -> str:
    """The answer's README.md: what was asked, how it was answered, the ranked table."""
    pct = 100.0 if quality == "accuracy" else 1.0
    unit = " %" if quality == "accuracy" else ""

    def fmt(v: float, signed: bool = False) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "–"
        return f"{v * pct:+.2f}" if signed else f"{v * pct:.2f}"

    rows = [
        [
            r["rank"],
            r["optimizer"],
            f"{r['lr']:.3g}" if isinstance(r["lr"], float) and not math.isnan(r["lr"]) else "–",
            fmt(r[f"val_{quality}"]),
            f"{fmt(r[f'test_{quality}'])} ± {fmt(r['test_ci'])}",
            f"{fmt(r['test_vs_first'], True)} [{fmt(r['vs_first_low'], True)}, "
            f"{fmt(r['vs_first_high'], True)}]",
            r["diverged"],
        ]
        for _, r in table.iterrows()
    ]
    header = [
        "rank",
        "optimizer",
        "rate",
        f"val {quality}{unit}",
        f"test {quality}{unit} (95 % CI)",
        "test vs first (95 % CI)",
        "diverged seeds",
    ]
    first = table.iloc[0]
    lines = [
        f"# {title}",
        "",
        f"**Answer:** {first['optimizer']} at rate {first['lr']:.3g} ranks first on validation; "
        "the table says which contenders the seeds cannot tell apart from it (an interval of "
        "the difference that holds 0).",
        "",
        "```bash",
        command,
        "```",
        "",
        f"Contenders: {rule}.",
        "",
        *protocol,
        "",
        markdown_table(pd.DataFrame(rows, columns=header), index=False),
        "",
        "Ranked by mean final validation quality over the seeds (a contender with a diverged "
        "seed last); the test set only reports. Intervals: t over seeds; the difference to the "
        "first, Welch's t.",
        "",
        "![convergence](convergence.png)",
        "",
        "## Cost",
        "",
        *[f"* {line}" for line in cost],
        "* measured: "
        + ", ".join(f"phase {i + 1} {s / 60:.1f} min" for i, s in enumerate(seconds))
        + " of wall time here (phases skip what finished before: a resumed answer counts the "
        "last stretch only)",
        "",
    ]
    return "\n".join(lines)
