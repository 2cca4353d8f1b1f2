"""Choose the course study's learning rates from the lr_grid study.

    python experiments/course_lr.py [results/lr_grid]

Rule: for each optimizer, the learning rate of the grid with the highest final test accuracy
averaged over the three nets (mean over seeds first), among the rates at which no run of that
optimizer diverged on any net. One rate per optimizer, as in the course's comparison. Prints
the per-net table and the `course.lr` block for conf/experiment/course.yaml.
"""

from __future__ import annotations

import sys

import pandas as pd

from harness.analysis import summarize
from harness.results import load_runs


def choose(lr_grid: str) -> pd.DataFrame:
    summary = summarize(load_runs(lr_grid))
    accuracy = summary.pivot_table(
        index=["optimizer", "lr"], columns="model", values="final_test_accuracy_mean"
    )
    diverged = summary.groupby(["optimizer", "lr"])["n_diverged"].sum()
    accuracy["mean"] = accuracy.mean(axis=1)
    accuracy["diverged_runs"] = diverged
    safe = accuracy[accuracy["diverged_runs"] == 0]
    best = safe.loc[safe.groupby(level="optimizer")["mean"].idxmax()]
    return best.reset_index()


def main() -> None:
    folder = sys.argv[1] if len(sys.argv) > 1 else "results/lr_grid"
    best = choose(folder)
    pd.set_option("display.width", 120)
    print(best.round(4).to_string(index=False))
    print("\ncourse:\n  lr:")
    for optimizer, lr in zip(best["optimizer"], best["lr"], strict=True):
        print(f"    {optimizer}: {lr:g}")


if __name__ == "__main__":
    main()
