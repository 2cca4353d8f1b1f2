"""What searching each optimizer's rate where it lives changed in the zoo's phase 1.

    python experiments/zoo_ranges.py [results/zoo_tune] [results/zoo_wide_tune]

Phase 1 of the constant-rate zoo in `results/zoo_wide_tune` drew ten rates from one range for
every optimizer, 1e-4..3; `results/zoo_tune` draws them from each optimizer's own range, two
decades each way of its default rate, and searches again beyond a pick at the edge
(conf/experiment/zoo_tune.yaml; the draws the two share are the same runs). Per net and
optimizer this compares the pick of each (the best trial on validation: `selection.choose`):
whether it moved (another trial), where, and what it gained on validation at 2,000 iterations;
optimizers whose config changed in between (their defaults, issue 39) are compared too, and
marked. Writes <new>/ranges.md.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from harness.markdown import markdown_table
from harness.results import load_runs
from harness.tuning.selection import choose

ROOT = Path(__file__).resolve().parents[1]
KEY = "optimizer.lr"
# the optimizers whose config changed with the faithful defaults (issue 39): their old picks are
# another optimizer's, in effect
CHANGED_DEFAULTS = ("adashift", "adopt", "fadam", "kron", "pto_adafactor", "rose")
NOTICEABLE = 0.001  # a gain of at least 0.1 point of validation accuracy


def picks(folder: Path) -> pd.DataFrame:
    """Per net and optimizer of a tuning study: the pick's rate and validation accuracy, and
    the trials' number and range."""
    runs = load_runs(folder)
    runs = runs.assign(lr=[json.loads(c).get(KEY) for c in runs["config"]])
    chosen = choose(runs, [KEY], [])
    rate = runs.set_index("config_id")["lr"]
    tried = runs.groupby(["model", "optimizer"])["lr"].agg(["count", "min", "max"])
    tried.index.names = ["net", "optimizer"]
    table = pd.DataFrame(
        {
            "net": chosen["model"].to_numpy(),
            "optimizer": chosen["optimizer"].to_numpy(),
            "lr": chosen["config_id"].map(rate).to_numpy(),
            "val": chosen["final_val_accuracy_mean"].to_numpy(),
        }
    ).set_index(["net", "optimizer"])
    return table.join(tried)


def compared(new: pd.DataFrame, old: pd.DataFrame) -> pd.DataFrame:
    both = new.join(old.add_suffix("_wide"), how="inner")
    both["moved"] = ~(both["lr"] == both["lr_wide"]) & both["lr"].notna()
    both["gain"] = both["val"] - both["val_wide"]
    both["defaults changed"] = both.index.get_level_values("optimizer").isin(CHANGED_DEFAULTS)
    return both


def _rate(value: float) -> str:
    return "—" if pd.isna(value) else f"{value:.3g}"


def reading(both: pd.DataFrame, new: Path, old: Path) -> str:
    lines = [
        f"# Each optimizer's own range: {new.name} against {old.name}",
        "",
        f"Phase 1's pick per net and optimizer (the best trial on validation, 2,000 iterations): "
        f"in `{old.name}` among ten rates drawn from 1e-4..3 for every optimizer, in "
        f"`{new.name}` among those drawn from its own range (two decades each way of its default "
        "rate, searched again beyond a pick at the edge). 'Moved': another trial is picked. "
        f"Optimizers whose defaults changed in between ({', '.join(CHANGED_DEFAULTS)}: the "
        "harness had passed None for a default it could not hold) train another optimizer in "
        "effect, and are counted apart.",
        "",
        "| net | optimizers | picks moved | of which gain ≥ 0.1 point | lose ≥ 0.1 point | "
        "defaults changed |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for net, rows in both.groupby(level="net", sort=False):
        same = rows[~rows["defaults changed"]]
        moved = same[same["moved"]]
        lines.append(
            f"| {net} | {len(rows)} | {len(moved)} | {(moved['gain'] >= NOTICEABLE).sum()} | "
            f"{(moved['gain'] <= -NOTICEABLE).sum()} | {rows['defaults changed'].sum()} |"
        )
    table = both[both["moved"] | both["defaults changed"]].reset_index()
    table = table.sort_values(["net", "gain"], ascending=[True, False])
    shown = pd.DataFrame(
        {
            "net": table["net"],
            "optimizer": table["optimizer"]
            + table["defaults changed"].map({True: " (defaults)", False: ""}),
            "pick, wide": table["lr_wide"].map(_rate),
            "pick, own range": table["lr"].map(_rate),
            "trials": table["count"].astype(int),
            "tried": table["min"].map(_rate) + "–" + table["max"].map(_rate),
            "val, wide (%)": (100 * table["val_wide"]).map("{:.2f}".format),
            "val, own range (%)": (100 * table["val"]).map("{:.2f}".format),
            "gain (points)": (100 * table["gain"]).map("{:+.2f}".format),
        }
    )
    lines += ["", "## The picks that moved", "", markdown_table(shown, index=False), ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("new", nargs="?", type=Path, default=ROOT / "results" / "zoo_tune")
    parser.add_argument("old", nargs="?", type=Path, default=ROOT / "results" / "zoo_wide_tune")
    args = parser.parse_args()
    both = compared(picks(args.new), picks(args.old))
    both = both.sort_index()  # net1 < net2 < net3, optimizers by name
    text = reading(both, args.new, args.old)
    (args.new / "ranges.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
