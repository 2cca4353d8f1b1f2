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

import json
from pathlib import Path

import pandas as pd

from harness import report
from harness.errors import ConfigError, run_reading
from harness.markdown import markdown_table
from harness.tuning.selection import ALIKE, choose, pick_sides

ROOT = Path(__file__).resolve().parents[1]
KEY = "optimizer.lr"
# the zoo's optimizers whose config changed with the faithful defaults (issue 39): their old
# picks are another optimizer's, in effect (Kron's changed too; the zoo has no Kron: it is refused
# on net2 and net3)
CHANGED_DEFAULTS = ("adashift", "adopt", "fadam", "pto_adafactor", "rose")
NOTICEABLE = 0.001  # a gain of at least 0.1 point of validation accuracy


def picks(runs: pd.DataFrame) -> pd.DataFrame:
    """Per net and optimizer of a tuning study's runs: the pick's rate and validation accuracy,
    and the trials' number (configs, whatever their seeds) and range."""
    runs = runs.assign(lr=[json.loads(c).get(KEY) for c in runs["config"]])
    chosen = choose(runs, [KEY], [])
    rate = runs.groupby("config_id")["lr"].first()
    trials = runs.groupby(["model", "optimizer"])
    tried = trials["lr"].agg(["min", "max"]).assign(count=trials["config_id"].nunique())
    tried.index.names = ["net", "optimizer"]
    table = pd.DataFrame(
        {
            "net": chosen["model"].to_numpy(),
            "optimizer": chosen["optimizer"].to_numpy(),
            "lr": chosen["config_id"].map(rate).to_numpy(),
            "val": chosen["final_val_accuracy_mean"].to_numpy(),
            # where every trial ends alike the rate moves nothing (the Muon family's AdamW
            # fallback trains net1's only layer at its own rate): the pick is the tie-break's
            "alike": [side == ALIKE for side in pick_sides(runs, chosen, KEY)],
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
        "rate, searched again beyond a pick at the edge). 'Moved': another trial is picked; "
        "'every trial alike': all of an optimizer's trials end with the same validation "
        "accuracy, the rate moves nothing and the pick is the tie-break's (the lower training "
        "loss, then the smaller rate). "
        f"Optimizers whose defaults changed in between ({', '.join(CHANGED_DEFAULTS)}: the "
        "harness had passed None for a default it could not hold) train another optimizer in "
        "effect, and are counted apart.",
        "",
        "| net | optimizers | picks moved | of which gain ≥ 0.1 point | lose ≥ 0.1 point | "
        "every trial alike | defaults changed |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for net, rows in both.groupby(level="net", sort=False):
        same = rows[~rows["defaults changed"]]
        moved = same[same["moved"]]
        lines.append(
            f"| {net} | {len(rows)} | {len(moved)} | {(moved['gain'] >= NOTICEABLE).sum()} | "
            f"{(moved['gain'] <= -NOTICEABLE).sum()} | {moved['alike'].sum()} | "
            f"{rows['defaults changed'].sum()} |"
        )
    table = both[both["moved"] | both["defaults changed"]].reset_index()
    table = table.sort_values(["net", "gain"], ascending=[True, False])
    shown = pd.DataFrame(
        {
            "net": table["net"],
            "optimizer": table["optimizer"]
            + table["defaults changed"].map({True: " (defaults)", False: ""})
            + table["alike"].map({True: " (every trial alike)", False: ""}),
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


def main(new: Path, old: Path) -> str:
    """Write <new>/ranges.md and return its text."""
    found = []
    for sweep in (new, old):
        if not sweep.is_dir():
            raise ConfigError(f"{sweep} is not a folder")
        runs = report.load_sweep_runs(sweep)
        if runs["final_val_accuracy"].isna().all():
            raise ConfigError(f"{sweep} has no validation accuracy to pick a rate by")
        found.append(picks(runs))
    both = compared(*found).sort_index()  # net1 < net2 < net3, optimizers by name
    if both.empty:
        raise ConfigError(f"{new} and {old} tune no net and optimizer in common")
    text = reading(both, new, old)
    (new / "ranges.md").write_text(text)
    return text


if __name__ == "__main__":
    run_reading(
        main,
        "What searching each optimizer's rate in its own range changed in phase 1: "
        "<new>/ranges.md.",
        {"new": ROOT / "results" / "zoo_tune", "old": ROOT / "results" / "zoo_wide_tune"},
    )
