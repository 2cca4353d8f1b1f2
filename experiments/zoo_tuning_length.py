"""Does tuning at a reduced length rank the course's optimizers like tuning at the full length?

    python experiments/zoo_tuning_length.py [results/course_tune]

The zoo cannot afford the course's protocol (10 rates per net x optimizer, each trained for the
full 20,000 iterations) for ~130 optimizers, so it tunes at a reduced length. The course's
tuning study answers what that costs, without training anything: with a constant learning rate
a run stopped at L iterations is the first L iterations of the full run (same seed, same
batches), so its recorded curve at L is the reduced protocol's trial. For each length L, each
net and optimizer: the trial with the best validation accuracy at L (diverged by L: never), and
what that trial reaches at 20,000 iterations; the full protocol chooses at 20,000. The
shortlist protocol (experiment=zoo_shortlist) trains the 3 best at L again to 20,000 and
chooses among them there. Optimizers
are ranked per net by the chosen trial's final validation accuracy (a choice that diverges
later ranks last), and the two rankings compared by Spearman's and Kendall's rank correlation.
Writes results/zoo/tuning_length.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from harness import storage

ROOT = Path(__file__).resolve().parents[1]
LENGTHS = (1000, 2000, 4000, 20000)  # the study evaluated every 1,000 iterations
FULL = LENGTHS[-1]
METRIC = "val_accuracy"


def chosen(curves: pd.DataFrame, runs: pd.DataFrame, length: int, top: int = 1) -> pd.DataFrame:
    """Per net and optimizer: the `top` trials best by validation accuracy at `length`, then
    the best of those at the full length (top=1: the trial chosen at `length`), with its rate
    and its final validation accuracy (a run that diverged: 0)."""
    at = curves[(curves.metric == METRIC) & (curves.iteration == length)]
    scored = runs.merge(at[["run_dir", "value"]], on="run_dir", how="inner")
    short = scored.sort_values("value", ascending=False).groupby(["model", "optimizer"]).head(top)
    by_run = runs.set_index("run_dir")
    final = by_run["final_val_accuracy"].where(by_run["status"] == "completed").fillna(0.0)
    short = short.assign(final=short["run_dir"].map(final))
    best = short.sort_values("final", ascending=False).groupby(["model", "optimizer"]).head(1)
    return best.set_index(["model", "optimizer"])[["lr", "final"]]


def main() -> None:
    source = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "results" / "course_tune")
    runs = storage.read_runs(source)
    curves = storage.read_curves(source, metrics=[METRIC]).to_pandas()
    curves["run_dir"] = curves["run_dir"].astype(str)
    runs = runs[runs["optimizer"] != "yellowfin"]  # one trial: nothing is chosen
    full = chosen(curves, runs, LENGTHS[-1])
    lines = [
        f"From {source.relative_to(ROOT) if source.is_relative_to(ROOT) else source}: "
        f"{runs['optimizer'].nunique()} optimizers x {runs['model'].nunique()} nets, "
        f"{runs.groupby(['model', 'optimizer']).size().max()} random rates each. Rank "
        "correlation between the ranking of the optimizers on each net when rates are chosen at "
        "L iterations and when they are chosen at 20,000 (both ranked by the chosen trial's "
        "validation accuracy at 20,000), and how many of the choices are the same trial:",
        "",
        "| protocol | net | Spearman | Kendall | same choice | cost |",
        "|---|---|---:|---:|---:|---:|",
    ]
    trials = runs.groupby(["model", "optimizer"]).size().max()
    for length in LENGTHS[:-1]:
        for top in (1, 3):
            reduced = chosen(curves, runs, length, top)
            # iterations trained (the shortlist from scratch), as a share of the full protocol's
            cost = (trials * length + (top * FULL if top > 1 else 0)) / (trials * FULL)
            name = f"choose at {length:,}" + (f", best {top} again at {FULL:,}" if top > 1 else "")
            for net in sorted(runs["model"].unique()):
                a = full.loc[net, "final"]
                b = reduced.loc[net, "final"].reindex(a.index)
                same = (full.loc[net, "lr"] == reduced.loc[net, "lr"].reindex(a.index)).sum()
                lines.append(
                    f"| {name} | {net} | {a.corr(b, method='spearman'):.2f} | "
                    f"{a.corr(b, method='kendall'):.2f} | {same}/{len(a)} | {cost:.0%} |"
                )
    text = "\n".join(lines) + "\n"
    out = ROOT / "results" / "zoo"
    out.mkdir(parents=True, exist_ok=True)
    (out / "tuning_length.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
