"""The course comparison chosen on validation data beside the one chosen on the test set.

    python experiments/course_fair.py [FAIR [TUNE [OLD]]]

(defaults: results/course, results/course_tune, results/course_test_selected)

Prints three Markdown tables (those of results/course/README.md):

1. Per net and optimizer, final test accuracy (mean ± 95 % CI over seeds) of the fair study
   (`experiment=course`: the rate its tuning study chose on validation, fresh seeds) beside the
   earlier table (`experiment=course_test_selected`: the rate with the best *test* accuracy of
   the lr_grid study at 4,000 iterations, trained on all 60,000 images), and new minus old.
2. What choosing on the test set flatters, measured within the tuning study (same runs, same
   data): the test accuracy of the trial that the test set would choose minus that of the trial
   the validation set chooses (the reported number's optimism), and whether they are the same.
3. Per cell, the two side by side: new minus old, and the flattery within the tuning study.
"""

from __future__ import annotations

import sys

import pandas as pd

from harness import analysis
from harness.results import load_runs
from harness.style import COURSE_OPTIMIZERS
from harness.tuning.selection import choose

# the course's nine and YellowFin, which the course study added
ORDER = [*COURSE_OPTIMIZERS, "yellowfin"]


def _cell(row: pd.Series, metric: str = "final_test_accuracy") -> str:
    mean, ci = row[f"{metric}_mean"] * 100, row[f"{metric}_ci"] * 100
    return f"{mean:.2f} ± {ci:.2f} ({row['lr']:.3g})"


def _per_config(folder: str) -> pd.DataFrame:
    """One row per net and optimizer: the config of a study that runs one rate per pair."""
    summary = analysis.summarize(load_runs(folder))
    return summary.set_index(["model", "optimizer"])


def comparison(fair: str, old: str) -> pd.DataFrame:
    new_rows, old_rows = _per_config(fair), _per_config(old)
    rows = []
    for optimizer in ORDER:
        row = {"optimizer": optimizer}
        for net in ("net1", "net2", "net3"):
            if (net, optimizer) not in new_rows.index or (net, optimizer) not in old_rows.index:
                continue
            n, o = new_rows.loc[(net, optimizer)], old_rows.loc[(net, optimizer)]
            diff = (n["final_test_accuracy_mean"] - o["final_test_accuracy_mean"]) * 100
            row[f"{net} test-selected"] = _cell(o)
            row[f"{net} validation-selected"] = _cell(n)
            row[f"{net} new − old"] = f"{diff:+.2f}"
        rows.append(row)
    return pd.DataFrame(rows)


def flattery(tune: str) -> pd.DataFrame:
    """Within the tuning study: the trial picked by validation and the one the test set would
    pick, per net and optimizer, and the test accuracy each reports."""
    runs = load_runs(tune)
    by_val = choose(runs, ["optimizer.lr"], []).set_index(["model", "optimizer"])
    summary = analysis.summarize(runs)
    by_test = analysis.best_configs(summary, by="final_test_accuracy", tune=(analysis.LR_KEY,))
    by_test = by_test.set_index(["model", "optimizer"])
    rows = []
    for (net, optimizer), v in by_val.iterrows():
        t = by_test.loc[(net, optimizer)]
        optimism = (t["final_test_accuracy_mean"] - v["final_test_accuracy_mean"]) * 100
        rows.append(
            {
                "net": net,
                "optimizer": optimizer,
                "rate chosen on validation": f"{v['lr']:.3g}",
                "its test accuracy": f"{v['final_test_accuracy_mean'] * 100:.2f}",
                "rate the test set would choose": f"{t['lr']:.3g}",
                "its test accuracy ": f"{t['final_test_accuracy_mean'] * 100:.2f}",
                "flattery (points)": f"{optimism:+.2f}",
            }
        )
    frame = pd.DataFrame(rows)
    frame["_o"] = frame["optimizer"].map({o: i for i, o in enumerate(ORDER)})
    return frame.sort_values(["net", "_o"]).drop(columns="_o")


def per_cell(fair: str, tune: str, old: str) -> pd.DataFrame:
    """Optimizer x net: 'new − old / flattery' in points (tables 1 and 2 in one)."""
    diffs = comparison(fair, old).set_index("optimizer")
    flattered = flattery(tune).set_index(["net", "optimizer"])["flattery (points)"]
    rows = []
    for optimizer, row in diffs.iterrows():
        cells = {"optimizer": optimizer}
        for net in ("net1", "net2", "net3"):
            if f"{net} new − old" in row and pd.notna(row[f"{net} new − old"]):
                cells[f"{net}: new − old / flattery"] = (
                    f"{row[f'{net} new − old']} / {flattered.loc[(net, optimizer)]}"
                )
        rows.append(cells)
    return pd.DataFrame(rows)


def main() -> None:
    from harness.markdown import markdown_table

    defaults = ["results/course", "results/course_tune", "results/course_test_selected"]
    fair, tune, old = [*sys.argv[1:], *defaults[len(sys.argv) - 1 :]][:3]
    print("## Final test accuracy (%), fair against test-selected\n")
    print(markdown_table(comparison(fair, old), index=False))
    print("\n## What choosing on the test set flatters (within the tuning study)\n")
    print(markdown_table(flattery(tune), index=False))
    print("\n## Per cell: new − old, and the flattery of choosing on the test set (points)\n")
    print(markdown_table(per_cell(fair, tune, old), index=False))


if __name__ == "__main__":
    main()
