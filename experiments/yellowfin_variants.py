"""YellowFin in the course, the authors' current code against the first (2017) version.

    python experiments/yellowfin_variants.py [CURRENT [OLD]] [--figure PNG]

(defaults: results/course, YellowFin at its defaults, variant "current"; and
results/course_yellowfin_2017/course, the same runs with variant "2017")

Prints one Markdown table per net: final and best test accuracy (mean ± 95 % CI over seeds),
final training loss, and the learning rate α and momentum μ YellowFin applied (the `lr` and
`momentum` curves): mean over seeds at the end, at its largest, and where the largest was.
With `--figure`, also draws α and μ per net, both variants (mean over seeds), into PNG (the
write-up's: results/course_yellowfin_2017/alpha_mu_old_vs_new.png). YellowFin's write-up,
results/course_yellowfin_2017/README.md, quotes both.
"""

from __future__ import annotations

import json
import sys

import pandas as pd

from harness import analysis
from harness.markdown import markdown_table
from harness.results import load_curves, load_runs
from harness.style import optimizer_color


def _pm(values: pd.Series, scale: float = 100.0) -> str:
    mean, half, _ = analysis.t_interval(values * scale)
    return f"{mean:.2f} ± {half:.2f}"


def yellowfin_runs(folder: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The YellowFin runs of `folder` with their variant (the config's `optimizer.variant`; a
    config without it ran before the setting existed, with what is now variant "2017"), and the
    mean over seeds of their `lr` and `momentum` curves (index net, variant, iteration)."""
    runs = load_runs(folder)
    runs = runs[runs["optimizer"] == "yellowfin"]
    variant = [json.loads(c).get("optimizer.variant", "2017") for c in runs["config"]]
    runs = runs.assign(variant=[str(v) for v in variant])
    curves = load_curves(folder, runs).merge(runs[["run_dir", "variant"]], on="run_dir")
    tuned = curves[curves["metric"].isin(["lr", "momentum"])]
    keys = ["model", "variant", "metric", "iteration"]
    return runs, tuned.groupby(keys)["value"].mean().unstack("metric")


def variant_rows(folder: str) -> pd.DataFrame:
    """One row per net and YellowFin variant among the runs of `folder`, summarised."""
    runs, mean = yellowfin_runs(folder)
    rows = []
    for (model, name), group in runs.groupby(["model", "variant"]):
        per_step = mean.loc[(model, name)]
        peak_at = int(per_step["lr"].idxmax())
        rows.append(
            {
                "net": model,
                "variant": name,
                "folder": folder,
                "seeds": len(group),
                "final test acc. %": _pm(group["final_test_accuracy"]),
                "best test acc. %": _pm(group["best_test_accuracy"]),
                "final train loss": f"{group['final_train_loss'].mean():.3f}",
                "α end": f"{per_step['lr'].iloc[-1]:.3g}",
                "α max (at step)": f"{per_step['lr'].max():.3g} ({peak_at})",
                "μ end": f"{per_step['momentum'].iloc[-1]:.2f}",
                "μ max": f"{per_step['momentum'].max():.2f}",
            }
        )
    return pd.DataFrame(rows)


def draw(folders: list[str], path: str) -> None:
    """α (log scale) and μ per net, one line per variant: the mean over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    means = pd.concat([yellowfin_runs(f)[1] for f in folders]).sort_index()
    nets = sorted(means.index.get_level_values("model").unique())
    fig, axes = plt.subplots(2, len(nets), figsize=(4.2 * len(nets), 6), sharex=True)
    # the current version in YellowFin's colour of every other figure, the 2017 one in grey
    styles = {"current": (optimizer_color("yellowfin"), "-"), "2017": ("#555555", "--")}
    for col, net in enumerate(nets):
        for name, (color, line) in styles.items():
            if (net, name) not in means.index.droplevel("iteration"):
                continue
            per_step = means.loc[(net, name)]
            label = "current (default)" if name == "current" else "2017 (before)"
            for row, metric in enumerate(["lr", "momentum"]):
                axes[row, col].plot(
                    per_step.index, per_step[metric], line, color=color, label=label
                )
        axes[0, col].set_title(net)
        axes[0, col].set_yscale("log")
        axes[1, col].set_xlabel("iteration (optimizer steps)")
    axes[0, 0].set_ylabel("learning rate α (log scale)")
    axes[1, 0].set_ylabel("momentum μ")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    axes[0, 0].legend(loc="lower right")
    fig.suptitle("YellowFin in the course: α and μ it applied, mean over 3 seeds, by variant")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str]) -> None:
    figure = None
    if "--figure" in argv:
        at = argv.index("--figure")
        figure, argv = argv[at + 1], argv[:at] + argv[at + 2 :]
    current = argv[0] if argv else "results/course"
    old = argv[1] if len(argv) > 1 else "results/course_yellowfin_2017/course"
    table = pd.concat([variant_rows(current), variant_rows(old)], ignore_index=True)
    table = table.sort_values(["net", "variant"], kind="stable")
    print(markdown_table(table, index=False))
    if figure:
        draw([current, old], figure)


if __name__ == "__main__":
    main(sys.argv[1:])
