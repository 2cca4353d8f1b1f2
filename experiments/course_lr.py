"""Choose learning rates from a grid study, per net and optimizer: how the table of
experiment=course_test_selected was made from the lr_grid study. (The fair course takes its
rates from experiment=course_tune by itself: harness.tuning.selection.)

    python experiments/course_lr.py [results/lr_grid]

Rule (`harness.analysis.best_configs`): for each net and optimizer, the grid rate with the
highest final validation accuracy (mean over the grid's seeds) among the rates at which no run
diverged; ties go to the lower final training loss, then to the smaller rate. The committed
lr_grid study holds out no validation data: for it the rule falls back to the test accuracy,
and the table says so. A rate at the
edge of the grid is flagged: the best rate may lie beyond it. Prints the table and the
`lookup.course_lr` block of conf/experiment/course_test_selected.yaml.
"""

from __future__ import annotations

import sys

import pandas as pd

from harness.analysis import (
    LR_KEY,
    best_configs,
    config_key,
    selection_metric,
    selection_text,
    summarize,
)
from harness.results import load_runs


def choose(runs: pd.DataFrame) -> pd.DataFrame:
    """The best rate of each net and optimizer of a grid study's runs (`load_runs`)."""
    best = best_configs(summarize(runs))
    # The grid's range of rates for each config with the rate left out (net, optimizer, ...).
    grid = runs["lr"].groupby(config_key(runs, without=(LR_KEY,))).agg(["min", "max"])
    others = config_key(best, without=(LR_KEY,))
    best["at_grid_edge"] = best["lr"].eq(others.map(grid["min"])) | best["lr"].eq(
        others.map(grid["max"])
    )
    return best


def main() -> None:
    folder = sys.argv[1] if len(sys.argv) > 1 else "results/lr_grid"
    runs = load_runs(folder)
    best = choose(runs)
    by = selection_metric(runs)
    print(f"{folder}: {selection_text(runs)}")
    columns = ["model", "optimizer", "lr", f"{by}_mean", "n_seeds", "at_grid_edge"]
    pd.set_option("display.width", 120)
    print(best[columns].round(4).to_string(index=False))
    print("\nlookup:\n  course_lr:")
    for model, rows in best.groupby("model"):
        pairs = zip(rows["optimizer"], rows["lr"], strict=True)
        rates = ", ".join(f"{o}: {float(lr)!r}" for o, lr in pairs)  # 3.0, not 3: a float
        print(f"    {model}: {{{rates}}}")


if __name__ == "__main__":
    main()
